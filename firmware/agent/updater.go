package agent

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Transport is what the updater needs of the hub connection (sync/uplink):
// the artifacts of an order, and somewhere to report.
type Transport interface {
	// Download writes artifact a's transfer bytes (Artifact.Transfer) of
	// order to dest, resuming a partial dest, checks their size and
	// SHA-256, and calls progress with the bytes done so far.
	Download(ctx context.Context, order int64, a protocol.Artifact, dest string, progress func(done int64)) error
	// Report publishes the device's update state: retained, the latest
	// wins, sent again by the transport when it reconnects.
	Report(s protocol.UpdateState)
}

// Driver installs an operating-system bundle with the device's own tool
// (firmware/rauc, firmware/swupdate).
type Driver interface {
	Install(ctx context.Context, path string, progress func(percent int, msg string)) error
}

// Options configure an Updater.
type Options struct {
	DataDir string
	Device  string
	Version string // the running version
	Arch    string // "" : Arch()
	// ReleaseKey checks release manifests (update.releaseKey, else the
	// hub's key).
	ReleaseKey ed25519.PublicKey
	// HubKeyID names the hub the orders come from (protocol.KeyID of its
	// key): the last order recorded is compared only with its orders.
	HubKeyID  string
	Transport Transport // nil: reports are only logged, nothing is downloaded
	Driver    Driver    // nil: firmware orders fail
	// Containers lists the running containers for the handoff and the
	// commit gate.
	Containers func() []Container
	// Restart ends the daemon's loop, leaving its pods running, and
	// executes the launcher; it is called once the links are switched
	// (to a new version, or back to the previous one).
	Restart func()
	// Reboot restarts the device into an installed firmware bundle
	// (nil: the device's owner reboots it).
	Reboot func() error
	// OnReport, when set, is told every state reported (the node's view
	// shows the last: NodeAnnotation).
	OnReport func(protocol.UpdateState)
	// CommitTimeout bounds the commit gate (update.commitTimeout).
	CommitTimeout time.Duration
	Log           *slog.Logger
	Now           func() time.Time
}

// Updater carries out update orders, one at a time, the newest winning.
type Updater struct {
	o      Options
	layout Layout

	mu      sync.Mutex
	pending *protocol.Order
	// cancel stops the install under way (order id running) while it can
	// still be dropped; committed: it switched.
	cancel   context.CancelCauseFunc
	running  int64
	switched bool
	wake     chan struct{}
}

// New returns an updater; Start begins its work.
func New(o Options) *Updater {
	if o.Arch == "" {
		o.Arch = Arch()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.CommitTimeout <= 0 {
		o.CommitTimeout = 5 * time.Minute
	}
	return &Updater{o: o, layout: NewLayout(o.DataDir), wake: make(chan struct{}, 1)}
}

// Order hands the updater a verified order (sync/uplink calls it). It
// returns at once: orders run on the updater's goroutine, one at a time;
// a newer order replaces one still waiting and cancels an install that
// has not switched yet (a withdrawal, an order without a release, lets it
// finish).
func (u *Updater) Order(_ context.Context, o *protocol.Order) {
	if o == nil {
		return
	}
	u.mu.Lock()
	if u.pending != nil && o.ID <= u.pending.ID || o.ID < u.running {
		u.mu.Unlock()
		return
	}
	u.pending = o
	// A withdrawal (no release) lets an install under way finish.
	if u.cancel != nil && o.ID > u.running && !u.switched && len(o.Release) > 0 {
		u.cancel(errSuperseded)
	}
	u.mu.Unlock()
	select {
	case u.wake <- struct{}{}:
	default:
	}
}

// Run serves orders until ctx ends.
func (u *Updater) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-u.wake:
		}
		u.mu.Lock()
		o := u.pending
		u.pending = nil
		octx, cancel := context.WithCancelCause(ctx)
		if o != nil {
			u.cancel, u.running, u.switched = cancel, o.ID, false
		}
		u.mu.Unlock()
		if o != nil {
			u.handle(octx, o)
		}
		cancel(nil)
		u.mu.Lock()
		u.cancel = nil
		u.mu.Unlock()
	}
}

// record is state.json: the last order's final (or Restarting) state,
// and the hub whose order it was.
type record struct {
	protocol.UpdateState
	HubKey string `json:"hubKey,omitempty"`
}

// last is the last order the device finished (state.json), zero if none.
func (u *Updater) last() protocol.UpdateState { return u.lastRecord().UpdateState }

func (u *Updater) lastRecord() record {
	var r record
	if data, err := readBounded(u.layout.statePath(), 1<<16); err == nil {
		json.Unmarshal(data, &r)
	}
	return r
}

// lastOfThisHub is the last order of the hub the orders come from now:
// another hub's (a device enrolled anew) numbers its orders apart.
func (u *Updater) lastOfThisHub() protocol.UpdateState {
	if r := u.lastRecord(); r.HubKey == u.o.HubKeyID {
		return r.UpdateState
	}
	return protocol.UpdateState{}
}

// report sends a state, and records a final one so that the order, sent
// again, is not carried out twice.
func (u *Updater) report(s protocol.UpdateState) {
	s.Schema, s.Device, s.Time = protocol.Schema, u.o.Device, u.o.Now()
	if s.Running == "" && s.Kind == protocol.ReleaseAgent {
		s.Running = u.o.Version // a firmware report's is the booted system's, when known
	}
	if len(s.Reason) > 1000 {
		s.Reason = s.Reason[:1000]
	}
	if protocol.UpdateDone(s.Phase) || s.Phase == protocol.UpdateRestarting {
		data, err := json.Marshal(record{UpdateState: s, HubKey: u.o.HubKeyID})
		if err == nil {
			err = os.MkdirAll(u.layout.Dir, 0o700)
		}
		if err == nil {
			err = writeFileAtomic(u.layout.statePath(), data)
		}
		if err != nil {
			u.o.Log.Error("update: recording the state", "err", err)
		}
	}
	lvl := slog.LevelInfo
	switch {
	case s.Phase == protocol.UpdateFailed || s.Phase == protocol.UpdateRolledBack:
		lvl = slog.LevelWarn
	case s.Percent > 0 && s.Percent < 100:
		// Progress within a phase goes to the hub; the log keeps each
		// phase's start and end (a download logged every percent was a
		// hundred lines in the journal).
		lvl = slog.LevelDebug
	}
	u.o.Log.Log(context.Background(), lvl, "update "+s.Phase, "order", s.Order, "kind", s.Kind, "version", s.Version,
		"percent", s.Percent, "reason", s.Reason)
	if u.o.Transport != nil {
		u.o.Transport.Report(s)
	}
	if u.o.OnReport != nil {
		u.o.OnReport(s)
	}
}

// NodeAnnotation carries the last update state on the node's view
// (podvisor get node), as Describe words it.
const NodeAnnotation = "update.podvisor.io/state"

// Describe words an update state in one line: "firmware v2.1.0:
// Installing 40%", "agent v1.3.0: RolledBack: <reason>".
func Describe(s protocol.UpdateState) string {
	out := s.Kind + " " + s.Version + ": " + s.Phase
	if !protocol.UpdateDone(s.Phase) {
		out += fmt.Sprintf(" %d%%", s.Percent)
	}
	if s.Reason != "" {
		out += ": " + s.Reason
	}
	return out
}

// handle carries out one order.
func (u *Updater) handle(ctx context.Context, o *protocol.Order) {
	last := u.lastOfThisHub()
	if o.ID < last.Order || o.ID == last.Order && last.Phase != "" {
		if o.ID == last.Order && u.o.Transport != nil {
			u.o.Transport.Report(last) // the hub asks again: it has it
		}
		return
	}
	if len(o.Release) == 0 {
		u.o.Log.Info("update order withdrawn", "order", o.ID)
		return
	}
	if cur, _ := u.layout.Linked(linkCurrent); cur != nil && cur.Record.Order == o.ID && cur.Record.State == StateTrial {
		return // this order's version runs on trial: the commit gate reports
	}
	st := protocol.UpdateState{Order: o.ID, Kind: protocol.ReleaseAgent}
	fail := func(err error) { u.fail(ctx, o.ID, st, err) }
	st.Phase = protocol.UpdateVerifying
	r, same, err := checkRelease(o, u.o.ReleaseKey, u.o.Arch, u.o.Version)
	if r != nil {
		st.Kind, st.Version = r.Kind, r.Version
	}
	if err != nil {
		fail(err)
		return
	}
	if same {
		st.Phase, st.Percent = protocol.UpdateCommitted, 100
		u.report(st)
		return
	}
	if r.Kind == protocol.ReleaseFirmware {
		u.firmware(ctx, o, r, st, fail)
		return
	}
	if err := u.install(ctx, o, r, &st); err != nil {
		fail(err)
		return
	}
	st.Phase, st.Percent = protocol.UpdateRestarting, 0
	u.report(st)
	if u.o.Restart != nil {
		u.o.Restart()
	}
}

var errSuperseded = errors.New("superseded by a newer order")

// fail ends an order that did not switch: what it downloaded or staged is
// removed and Failed reported with err. When the daemon stops meanwhile
// (ctx ended, not by a newer order) nothing is reported or removed: the
// order comes again at the next start and its download resumes.
func (u *Updater) fail(ctx context.Context, order int64, st protocol.UpdateState, err error) {
	if ctx.Err() != nil && context.Cause(ctx) != errSuperseded {
		u.o.Log.Info("update interrupted: the daemon stops", "order", order)
		return
	}
	os.RemoveAll(filepath.Join(u.layout.downloads(), fmt.Sprint(order)))
	u.layout.Collect(0)
	st.Phase, st.Percent, st.Reason = protocol.UpdateFailed, 0, err.Error()
	if ctx.Err() != nil {
		st.Reason = errSuperseded.Error()
	}
	u.report(st)
}

// firmware downloads and verifies a bundle and hands it to the driver.
func (u *Updater) firmware(ctx context.Context, o *protocol.Order, r *protocol.Release, st protocol.UpdateState, fail func(error)) {
	if u.o.Driver == nil {
		fail(errors.New("no firmware driver configured (firmware.driver)"))
		return
	}
	files, err := u.fetch(ctx, o.ID, r.Artifacts, nil, &st)
	if err != nil {
		fail(err)
		return
	}
	bundle := filepath.Join(u.layout.downloads(), fmt.Sprint(o.ID), r.Artifacts[0].Name)
	if err := u.place(files[0], bundle, r.Artifacts[0]); err != nil {
		fail(err)
		return
	}
	st.Phase, st.Percent = protocol.UpdateInstalling, 0
	u.report(st)
	err = u.o.Driver.Install(ctx, bundle, func(percent int, msg string) {
		if percent < 0 || percent > 100 || percent == st.Percent {
			return
		}
		st.Percent = percent
		u.report(st)
	})
	os.RemoveAll(filepath.Join(u.layout.downloads(), fmt.Sprint(o.ID)))
	if err != nil {
		fail(fmt.Errorf("installing %s: %w", r.Artifacts[0].Name, err))
		return
	}
	st.Phase, st.Percent = protocol.UpdateRestarting, 0
	u.report(st)
	if u.o.Reboot != nil {
		if err := u.o.Reboot(); err != nil {
			u.o.Log.Error("update: rebooting into the new bundle", "err", err)
		}
	}
}

// FirmwareSettled reports how the firmware order that restarted the
// device ended, once the health gate after the reboot decided (the
// driver's Confirm): committed, or rolled back with reason; running is
// the system the device runs now. Without a firmware order waiting for
// its reboot it reports nothing.
func (u *Updater) FirmwareSettled(committed bool, running, reason string) {
	last := u.last()
	if last.Kind != protocol.ReleaseFirmware || last.Phase != protocol.UpdateRestarting {
		return
	}
	st := protocol.UpdateState{Order: last.Order, Kind: last.Kind, Version: last.Version, Phase: protocol.UpdateCommitted,
		Percent: 100, Running: running, Previous: last.Running}
	if !committed {
		st.Phase, st.Percent, st.Reason = protocol.UpdateRolledBack, 0, reason
	} else if st.Running == "" {
		st.Running = last.Version
	}
	u.report(st)
}
