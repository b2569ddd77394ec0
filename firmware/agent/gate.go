package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Container is a running container as the handoff records it and the
// commit gate finds it again: a restart gives it a new ID (the instance,
// with its attempt) and start time.
type Container struct {
	PodUID    string    `json:"podUid"`
	Pod       string    `json:"pod"` // namespace/name
	Name      string    `json:"container"`
	ID        string    `json:"id"`
	StartedAt time.Time `json:"startedAt"`
	// Ended is the reason a container's end was recorded with ("" while
	// it runs): the gate's view also lists the containers that ended
	// since the switch.
	Ended string `json:"ended,omitempty"`
}

// lostReason is how a daemon records a container it could not find
// again: its state was lost, not ended by the container itself.
const lostReason = "ContainerStatusUnknown"

func (c Container) key() string { return c.PodUID + "/" + c.Name }

// Handoff is what the daemon that switched left for the one it started.
type Handoff struct {
	// BootID is the kernel's boot_id: after a reboot no container can
	// have survived, and the handoff does not count.
	BootID     string      `json:"bootId"`
	Containers []Container `json:"containers"`
}

const bootIDPath = "/proc/sys/kernel/random/boot_id"

func bootID() string {
	data, _ := readBounded(bootIDPath, 128)
	return strings.TrimSpace(string(data))
}

func (u *Updater) writeHandoff() error {
	h := Handoff{BootID: bootID()}
	if u.o.Containers != nil {
		for _, c := range u.o.Containers() {
			if c.Ended == "" {
				h.Containers = append(h.Containers, c)
			}
		}
	}
	data, err := json.Marshal(h)
	if err != nil {
		return err
	}
	return writeFileAtomic(u.layout.handoffPath(), data)
}

// readHandoff is the handoff of this boot (empty without one).
func (u *Updater) readHandoff() Handoff {
	var h Handoff
	if data, err := readBounded(u.layout.handoffPath(), 16<<20); err == nil {
		json.Unmarshal(data, &h)
	}
	if h.BootID != bootID() {
		return Handoff{}
	}
	return h
}

// GateFacts are what the commit gate knows at a moment.
type GateFacts struct {
	Now, Deadline time.Time
	// Ready: the daemon sent (or would send) READY: its state restored,
	// its pods adopted, its API listening.
	Ready bool
	// HubNeeded: a hub is configured; HubReached: it answered a
	// heartbeat.
	HubNeeded, HubReached bool
	// Handoff are the containers that ran at the switch; Running those
	// the new daemon shows (looked at once Ready), the ones that ended
	// with their Ended reason.
	Handoff, Running []Container
	Timeout          time.Duration
}

// Judge is the commit gate's verdict: done with reason "" to commit, done
// with a reason to roll back, or not done yet.
func Judge(f GateFacts) (done bool, reason string) {
	if f.Ready {
		running := map[string]Container{}
		ended := map[string]string{} // by container ID
		for _, c := range f.Running {
			if c.Ended != "" {
				ended[c.ID] = c.Ended
				continue
			}
			running[c.key()] = c
		}
		for _, h := range f.Handoff {
			c, ok := running[h.key()]
			// A container that ended by itself after the switch (a job
			// done, a crash its restart policy answers) was adopted: the
			// new daemon saw its end. One whose state was lost was not.
			if why, done := ended[h.ID]; done && why != lostReason && (!ok || c.ID != h.ID) {
				continue
			}
			switch {
			case !ok:
				return true, fmt.Sprintf("container %s of pod %s was not adopted", h.Name, h.Pod)
			// The API shows start times to the second (metav1.Time).
			case c.ID != h.ID || !c.StartedAt.Truncate(time.Second).Equal(h.StartedAt.Truncate(time.Second)):
				return true, fmt.Sprintf("container %s of pod %s was restarted (%s, now %s)", h.Name, h.Pod, h.ID, c.ID)
			}
		}
		if !f.HubNeeded || f.HubReached {
			return true, ""
		}
	}
	if f.Now.Before(f.Deadline) {
		return false, ""
	}
	if !f.Ready {
		return true, fmt.Sprintf("not ready within %s", f.Timeout)
	}
	return true, fmt.Sprintf("no heartbeat receipt from the hub within %s", f.Timeout)
}

// GateSignals are the new daemon's events the gate waits for.
type GateSignals struct {
	Ready <-chan struct{} // closed at READY
	// HubReached is closed at the hub's first heartbeat receipt; nil
	// without a hub.
	HubReached <-chan struct{}
}

// Start is the updater's start-up in a daemon: it reports a rollback that
// brought this version back, clears what a crash left, and, when this
// process runs a trial slot, runs its commit gate. Then it serves orders
// until ctx ends.
func (u *Updater) Start(ctx context.Context, sig GateSignals) {
	for _, s := range u.layout.Failed() {
		u.report(protocol.UpdateState{Order: s.Record.Order, Kind: protocol.ReleaseAgent, Version: s.Record.Version,
			Phase: protocol.UpdateRolledBack, Reason: s.Record.LastError, Previous: s.Record.Version})
		u.layout.Remove(s.Name)
	}
	cur, _ := u.layout.Linked(linkCurrent)
	self, _ := Self()
	trial := cur != nil && cur.Record.State == StateTrial && sameFile(self, cur.Binary())
	if !trial {
		u.reportLostCommit(cur)
		u.layout.Collect(u.lastOfThisHub().Order + 1)
		os.Remove(u.layout.handoffPath())
		go u.Run(ctx)
		return
	}
	go func() {
		if u.gate(ctx, cur, sig) {
			u.Run(ctx)
		}
	}()
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

// gate waits for the trial slot's proof, then commits it (true) or rolls
// it back and restarts into the previous version (false).
func (u *Updater) gate(ctx context.Context, cur *Slot, sig GateSignals) bool {
	f := GateFacts{Deadline: u.o.Now().Add(u.o.CommitTimeout), Timeout: u.o.CommitTimeout,
		HubNeeded: sig.HubReached != nil, Handoff: u.readHandoff().Containers}
	timer := time.NewTimer(u.o.CommitTimeout)
	defer timer.Stop()
	ready, hub := sig.Ready, sig.HubReached
	for {
		f.Now = u.o.Now()
		done, reason := Judge(f)
		if done {
			if reason == "" {
				u.commit(cur)
				return true
			}
			u.rollBack(cur, reason)
			return false
		}
		select {
		case <-ctx.Done():
			return false // the daemon stops: the launcher counts the next start
		case <-ready:
			ready, f.Ready = nil, true
			if u.o.Containers != nil {
				f.Running = u.o.Containers()
			}
		case <-hub:
			hub, f.HubReached = nil, true
		case <-timer.C:
			f.Deadline = time.Time{} // the time is up, whatever Now says
		}
	}
}

// commit marks the trial slot committed, removes older slots and reports.
func (u *Updater) commit(cur *Slot) {
	prev, _ := u.layout.Linked(linkPrevious)
	if _, err := u.layout.Commit(); err != nil {
		u.o.Log.Error("update: committing", "err", err)
		return
	}
	crashPoint("committed")
	os.Remove(u.layout.handoffPath())
	u.layout.Collect(cur.Record.Order + 1)
	st := protocol.UpdateState{Order: cur.Record.Order, Kind: protocol.ReleaseAgent, Version: cur.Record.Version,
		Phase: protocol.UpdateCommitted, Percent: 100}
	if prev != nil {
		st.Previous = prev.Record.Version
	}
	u.report(st)
}

// reportLostCommit reports Committed for the current slot when a cut
// between its commit and the report left the order recorded as
// Restarting: the order, sent again, would only repeat that, and the
// hub's wave would wait on the device for good.
func (u *Updater) reportLostCommit(cur *Slot) {
	last := u.last()
	if cur == nil || cur.Record.State != StateCommitted || cur.Record.Version != u.o.Version ||
		last.Kind != protocol.ReleaseAgent || last.Phase != protocol.UpdateRestarting || last.Order != cur.Record.Order {
		return
	}
	st := protocol.UpdateState{Order: cur.Record.Order, Kind: protocol.ReleaseAgent, Version: cur.Record.Version,
		Phase: protocol.UpdateCommitted, Percent: 100, Previous: last.Running}
	u.report(st)
}

// rollBack records why the trial failed, switches back and restarts.
func (u *Updater) rollBack(cur *Slot, reason string) {
	reason = fmt.Sprintf("%s: %s", cur.Record.Version, reason)
	if _, err := u.layout.RollBack(reason); err != nil {
		u.o.Log.Error("update: rolling back", "err", err)
	}
	u.o.Log.Warn("update: rolling back", "version", cur.Record.Version, "reason", reason)
	if u.o.Restart != nil {
		u.o.Restart()
	}
}

// RecordError notes why the daemon of a trial slot failed in its record,
// for the rollback's reason; the launcher counts the start.
func RecordError(dataDir string, err error) {
	l := NewLayout(dataDir)
	cur, lerr := l.Linked(linkCurrent)
	self, _ := Self()
	if lerr != nil || cur == nil || cur.Record.State != StateTrial || !sameFile(self, cur.Binary()) {
		return
	}
	cur.Record.LastError = truncate(err.Error(), 512)
	writeRecord(cur.Dir, cur.Record)
}
