package updates

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Publisher signs, stores and publishes a device's next update order
// (the device link).
type Publisher interface {
	// Order orders device to install release (signed, as pushed) for
	// update; it returns the order's ID.
	Order(device, update string, release []byte, allowDowngrade bool) (int64, error)
	// Withdraw publishes an order without a release: nothing new starts.
	Withdraw(device string) error
}

// Driver runs every active update's controller over the fleet
// database: after a report that may move one (Kick), after an operator's
// change, and when a targeted device that is Ready goes silent past its
// timeout (a timer, not polling).
type Driver struct {
	fleet   *fleetdb.Fleet
	pub     Publisher
	log     *slog.Logger
	now     func() time.Time
	timeout time.Duration
	kick    chan struct{}
	done    chan struct{}
	wg      sync.WaitGroup
	// passing serialises passes with the operator's changes.
	passing sync.Mutex
	// wake is when the last pass's first Ready target goes stale if not
	// heard from (zero: none); guarded by passing.
	wake time.Time
	// pause waits gap after a pass, false when the driver closes (a
	// test's hook).
	pause func(gap time.Duration) bool
	// gate, when set, says whether this replica may run passes: the
	// leader only (SetGate); forward asks the leader for the pass the
	// gate refused.
	gate    func() bool
	forward func()
}

// SetGate makes the loop's passes wait for leading to say true (several
// replicas: the leader drives the updates); Kick once it does. A pass
// asked for while it says false is handed to forward, when set (nil:
// dropped): how the leader hears of a report or a change made through
// another replica. Set before Start.
func (d *Driver) SetGate(leading func() bool, forward func()) {
	d.gate, d.forward = leading, forward
}

// minForwardGap spaces the passes a replica that does not lead asks the
// leader for (at most ten a second).
const minForwardGap = 100 * time.Millisecond

// minPassGap spaces the passes: every report that changes kicks the
// driver (a device's percent, its version), and a pass reads every
// target of every active update and writes its status, so kicks coalesce
// into at most a few passes a second, whatever a device sends.
const minPassGap = 250 * time.Millisecond

// NewDriver makes a driver; a device silent for timeout is not Ready.
func NewDriver(fleet *fleetdb.Fleet, pub Publisher, log *slog.Logger, now func() time.Time, timeout time.Duration) *Driver {
	if now == nil {
		now = time.Now
	}
	if timeout <= 0 {
		timeout = fleetdb.DefaultDeviceTimeout
	}
	d := &Driver{fleet: fleet, pub: pub, log: log, now: now, timeout: timeout, kick: make(chan struct{}, 1), done: make(chan struct{})}
	d.pause = d.wait
	return d
}

// Start starts the loop.
func (d *Driver) Start() {
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		for {
			select {
			case <-d.done:
				return
			case <-d.kick:
			case <-timer.C:
			}
			if d.gate != nil && !d.gate() {
				// Another replica leads: it runs the pass (and this one a
				// kick when it leads).
				timer.Stop()
				if d.forward == nil {
					continue
				}
				started := time.Now()
				d.forward()
				if !d.pause(minForwardGap - time.Since(started)) {
					return
				}
				continue
			}
			started := time.Now()
			err := d.Pass()
			if err != nil {
				d.log.Error("update pass", "err", err)
			}
			d.passing.Lock()
			wake := d.wake
			d.passing.Unlock()
			if err != nil {
				wake = d.now().Add(10 * time.Second) // try again
			}
			timer.Stop()
			if !wake.IsZero() {
				timer.Reset(max(wake.Sub(d.now()), 100*time.Millisecond))
			}
			if !d.pause(minPassGap - time.Since(started)) {
				return
			}
		}
	}()
}

// wait is the pause between passes.
func (d *Driver) wait(gap time.Duration) bool {
	if gap <= 0 {
		return true
	}
	select {
	case <-d.done:
		return false
	case <-time.After(gap):
		return true
	}
}

// Close stops the loop.
func (d *Driver) Close() {
	select {
	case <-d.done:
	default:
		close(d.done)
	}
	d.wg.Wait()
}

// Kick asks for a pass; kicks coalesce.
func (d *Driver) Kick() {
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

// Pass runs each active update's controller once, publishes its orders
// and stores its status.
func (d *Driver) Pass() error {
	d.passing.Lock()
	defer d.passing.Unlock()
	d.wake = time.Time{}
	active, err := d.fleet.Updates(true)
	if err != nil {
		return err
	}
	var errs []error
	for _, u := range active {
		if err := d.pass(u); err != nil {
			errs = append(errs, fmt.Errorf("update %s: %w", u.Name, err))
		}
	}
	return errors.Join(errs...)
}

func (d *Driver) pass(u fleetdb.StoredUpdate) error {
	var spec Spec
	if err := json.Unmarshal(u.Spec, &spec); err != nil {
		return err
	}
	var prev Status
	json.Unmarshal(u.Status, &prev)
	stored, err := d.fleet.Release(spec.Release, spec.Version)
	if err != nil {
		return err
	}
	rel, err := releases.Decode(stored.Manifest)
	if err != nil {
		return err
	}
	targets, err := d.fleet.UpdateTargets(spec.Targets)
	if err != nil {
		return err
	}
	now := d.now()
	in := Input{Spec: spec, Release: Release{Kind: rel.Kind, Version: rel.Version, Arches: rel.Architectures()}, Previous: prev, Now: now}
	for _, t := range targets {
		dev := Device{ID: t.ID, Ready: t.Online && now.Sub(t.LastSeen) < d.timeout, Arch: t.Arch, Running: t.Version, State: t.State}
		if stale := t.LastSeen.Add(d.timeout); dev.Ready && (d.wake.IsZero() || stale.Before(d.wake)) {
			d.wake = stale // it stops being Ready then, with no report to say so
		}
		if rel.Kind == protocol.ReleaseFirmware {
			dev.Running = ""
			if t.State != nil && t.State.Kind == protocol.ReleaseFirmware {
				dev.Running = t.State.Running
			}
		}
		if t.OrderUpdate == spec.Name {
			dev.Order = t.Order
		}
		in.Devices = append(in.Devices, dev)
	}
	dec := Plan(in)
	for _, id := range dec.Order {
		oid, err := d.pub.Order(id, spec.Name, stored.Manifest, spec.AllowDowngrade)
		if err != nil {
			// The status says ordered; the next pass reads the orders
			// stored and says again.
			d.log.Error("ordering an update", "update", spec.Name, "device", id, "err", err)
			break
		}
		d.log.Info("ordered an update", "update", spec.Name, "device", id, "order", oid, "version", spec.Version)
	}
	for _, id := range dec.Withdraw {
		if err := d.pub.Withdraw(id); err != nil {
			d.log.Error("withdrawing an update order", "update", spec.Name, "device", id, "err", err)
		}
	}
	if dec.Status.Phase != prev.Phase {
		d.log.Info("update "+dec.Status.Phase, "update", spec.Name, "reason", dec.Status.Reason,
			"done", dec.Status.Done, "failed", dec.Status.Failed, "targets", dec.Status.Targets)
	}
	raw, _ := json.Marshal(dec.Status)
	return d.fleet.SetUpdateStatus(spec.Name, raw, dec.Status.Running())
}

// Request is an operator's new update (podhub update, podhub firmware
// update).
type Request struct {
	Name             string            `json:"name,omitempty"`
	Kind             string            `json:"kind"`
	Release          string            `json:"release"`
	Version          string            `json:"version"`
	Device           string            `json:"device,omitempty"`
	Selector         map[string]string `json:"selector,omitempty"`
	MaxUnavailable   string            `json:"maxUnavailable,omitempty"`
	FailureThreshold string            `json:"failureThreshold,omitempty"`
	AllowDowngrade   bool              `json:"allowDowngrade,omitempty"`
}

// Create checks and stores a new update, and runs a pass for it.
func (d *Driver) Create(req Request) (Spec, error) {
	if req.Kind == "" {
		req.Kind = protocol.ReleaseAgent
	}
	if req.Release == "" && req.Kind == protocol.ReleaseAgent {
		req.Release = "podvisor"
	}
	if (req.Device == "") == (len(req.Selector) == 0) {
		return Spec{}, errors.New("update: name a device or a selector, not both")
	}
	stored, err := d.fleet.Release(req.Release, req.Version)
	if err != nil {
		return Spec{}, err
	}
	if stored.Kind != req.Kind {
		return Spec{}, fmt.Errorf("release %s %s is a %s release, not %s", req.Release, req.Version, stored.Kind, req.Kind)
	}
	targets := []string{req.Device}
	if req.Device == "" {
		if targets, err = d.fleet.Select(req.Selector); err != nil {
			return Spec{}, err
		}
		if len(targets) == 0 {
			return Spec{}, fmt.Errorf("update: no device matches %v", req.Selector)
		}
	} else if err := protocol.ValidDeviceID(req.Device); err != nil {
		return Spec{}, err
	}
	if _, err := ParseMaxUnavailable(req.MaxUnavailable, len(targets)); err != nil {
		return Spec{}, err
	}
	if _, err := ParseFailureThreshold(req.FailureThreshold); err != nil {
		return Spec{}, err
	}
	spec := Spec{Name: req.Name, Kind: req.Kind, Release: req.Release, Version: req.Version, Device: req.Device, Selector: req.Selector,
		Targets: targets, MaxUnavailable: req.MaxUnavailable, FailureThreshold: req.FailureThreshold, AllowDowngrade: req.AllowDowngrade,
		Created: d.now().UTC()}
	if spec.MaxUnavailable == "" {
		spec.MaxUnavailable = DefaultMaxUnavailable
	}
	if spec.FailureThreshold == "" {
		spec.FailureThreshold = DefaultFailureThreshold
	}
	d.passing.Lock()
	err = d.add(&spec)
	d.passing.Unlock()
	if err != nil {
		return Spec{}, err
	}
	d.Kick()
	return spec, nil
}

// add stores spec under its name, or the first free one of
// RELEASE-VERSION[-N] when it has none.
func (d *Driver) add(spec *Spec) error {
	named := spec.Name != ""
	if named {
		if err := protocol.ValidDeviceID(spec.Name); err != nil {
			return fmt.Errorf("update name: %w", err)
		}
	}
	for i := 1; ; i++ {
		if !named {
			spec.Name = spec.Release + "-" + spec.Version
			if i > 1 {
				spec.Name += fmt.Sprintf("-%d", i)
			}
		}
		raw, _ := json.Marshal(spec)
		status, _ := json.Marshal(Status{Phase: Progressing, Targets: len(spec.Targets), Updated: spec.Created})
		err := d.fleet.AddUpdate(fleetdb.StoredUpdate{Name: spec.Name, Spec: raw, Status: status, Created: spec.Created}, spec.Release, spec.Version, spec.Targets)
		if errors.Is(err, fleetdb.ErrUpdateExists) && !named && i < 1000 {
			continue
		}
		return err
	}
}

// Change pauses, resumes or aborts an update.
func (d *Driver) Change(name, verb string) (Status, error) {
	d.passing.Lock()
	u, err := d.fleet.Update(name)
	if err != nil {
		d.passing.Unlock()
		return Status{}, err
	}
	var spec Spec
	var st Status
	json.Unmarshal(u.Spec, &spec)
	json.Unmarshal(u.Status, &st)
	if !u.Active {
		d.passing.Unlock()
		return st, fmt.Errorf("update %s is %s: nothing to %s", name, st.Phase, verb)
	}
	switch verb {
	case "pause":
		spec.Paused = true
	case "resume":
		if st.Phase == Halted {
			d.passing.Unlock()
			return st, fmt.Errorf("update %s is halted (%s): abort it and start another", name, st.Reason)
		}
		spec.Paused = false
	case "abort":
		spec.Aborted = true
	default:
		d.passing.Unlock()
		return st, fmt.Errorf("update: unknown verb %q (pause, resume, abort)", verb)
	}
	raw, _ := json.Marshal(spec)
	err = d.fleet.SetUpdateSpec(name, raw)
	d.passing.Unlock()
	if err != nil {
		return st, err
	}
	if err := d.Pass(); err != nil {
		return st, err
	}
	u, err = d.fleet.Update(name)
	if err == nil {
		json.Unmarshal(u.Status, &st)
	}
	return st, err
}
