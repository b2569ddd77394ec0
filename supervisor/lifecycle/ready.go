package lifecycle

import (
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Ready is everything one step of the machine asks of the shell. The shell
// saves Records, then executes Actions, then hands the Ready back through
// Advance. An action with AfterSave set must not leave the process before
// every record in MustSave is durable: a Start whose record was lost would
// be started again by the next daemon, and an instance runs at most once.
type Ready struct {
	// Records are the changed instance records to save in this step, and
	// Forgotten the instances whose records go. Changes no action waits
	// on are batched for Config.SaveDelay; once a record must be saved,
	// every change goes in the same write.
	Records   []*Instance
	Forgotten []types.UID
	// MustSave are the instances whose records must be durable before
	// the actions marked AfterSave leave the process; each is in Records.
	MustSave []types.UID
	// Actions are what to do, in order.
	Actions []Action
	// Changed are the pods whose status changed since the last Ready,
	// forgotten ones included: their views must be built anew.
	Changed []types.UID
	// Unsaved reports changes left for a later Ready: what waits until
	// every change is durable must wait too.
	Unsaved bool
	// NextWake is when to ask for a Ready again without a new observation
	// (zero: no timer needed); it includes the end of a batch of saves.
	NextWake time.Time

	// revisions are those of Records and Changed when the Ready was
	// made: Advance acknowledges only what did not change since.
	revisions map[types.UID]uint64
}

// Ready reconciles at now and returns the step's output. Call Advance with
// it once its records are saved and its actions executed.
func (m *Machine) Ready(now time.Time) Ready {
	rd := Ready{Actions: m.reconcile(now), revisions: map[types.UID]uint64{}}
	if m.unsaved() && m.unsavedSince.IsZero() {
		m.unsavedSince = now
	}
	saveBy := m.unsavedSince.Add(m.cfg.SaveDelay)
	switch {
	case len(m.saveFirst) > 0 || (m.unsaved() && !now.Before(saveBy)):
		m.takeRecords(&rd)
		rd.MustSave = sortedUIDs(m.saveFirst)
	case m.unsaved():
		rd.Unsaved = true
		m.wakeAt(saveBy)
	}
	rd.Changed = sortedUIDs(m.viewed)
	for _, uid := range rd.Changed {
		if in := m.instances[uid]; in != nil {
			rd.revisions[uid] = in.revision
		}
	}
	rd.NextWake = m.nextWake
	return rd
}

// Flush returns a Ready that saves every unsaved change and does nothing
// else: the last save before the daemon exits.
func (m *Machine) Flush() Ready {
	rd := Ready{revisions: map[types.UID]uint64{}}
	m.takeRecords(&rd)
	return rd
}

// Advance acknowledges a Ready: its records are saved, its actions
// executed and its status changes shown. What changed since it was made
// stays for the next Ready.
func (m *Machine) Advance(rd Ready) {
	current := func(uid types.UID) bool {
		in := m.instances[uid]
		return in == nil || in.revision == rd.revisions[uid]
	}
	for _, in := range rd.Records {
		if current(in.UID()) {
			delete(m.dirty, in.UID())
		}
	}
	for _, uid := range rd.Forgotten {
		delete(m.forgotten, uid)
	}
	for _, uid := range rd.MustSave {
		delete(m.saveFirst, uid)
	}
	for _, uid := range rd.Changed {
		if current(uid) {
			delete(m.viewed, uid)
		}
	}
	if !m.unsaved() {
		m.unsavedSince = time.Time{}
	}
}

// takeRecords puts every unsaved change in rd, in UID order.
func (m *Machine) takeRecords(rd *Ready) {
	for _, uid := range sortedUIDs(m.dirty) {
		if in := m.instances[uid]; in != nil {
			rd.Records = append(rd.Records, in)
			rd.revisions[uid] = in.revision
		}
	}
	rd.Forgotten = sortedUIDs(m.forgotten)
}

func (m *Machine) unsaved() bool { return len(m.dirty) > 0 || len(m.forgotten) > 0 }

func sortedUIDs(set map[types.UID]bool) []types.UID {
	out := make([]types.UID, 0, len(set))
	for uid := range set {
		out = append(out, uid)
	}
	slices.Sort(out)
	return out
}
