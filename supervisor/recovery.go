package supervisor

import (
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// recovery is what becomes of an instance a runtime holds when the daemon
// starts, decided by recoverInstance and carried out by restoreFrom.
type recovery int

const (
	// recoverNothing: the records already say how it ended.
	recoverNothing recovery = iota
	// recoverUnrecorded: no record knows its pod; the pod may be rebuilt
	// from what the runtimes hold (rebuildLost).
	recoverUnrecorded
	// recoverOrphan: alive, but its pod's record does not know its
	// container: it is killed as an instance of its own, which blocks
	// the pod's name until its processes are gone.
	recoverOrphan
	// recoverRemove: finished, and its pod's record does not know its
	// container: what is left of it goes.
	recoverRemove
	// recoverAdopt: alive, the recorded attempt or a later one: the
	// daemon follows it, never starts it again.
	recoverAdopt
	// recoverKillSuperseded: alive, but an attempt older than the
	// record's: a newer one replaced it.
	recoverKillSuperseded
	// recoverReportExit: the recorded instance ended while the daemon
	// was away: its recorded exit is reported.
	recoverReportExit
	// recoverDiscard: a finished instance the record has moved past:
	// removed, and not counted as held.
	recoverDiscard
)

var recoveryNames = [...]string{"nothing", "unrecorded", "orphan", "remove", "adopt", "kill superseded", "report exit", "discard"}

func (r recovery) String() string { return recoveryNames[r] }

// recoverInstance decides what becomes of an instance a runtime holds at
// start. podKnown says whether a record knows its pod; rec is the record
// of its container (nil if the pod's record has none).
func recoverInstance(f runtime.Found, podKnown bool, rec *lifecycle.Container) recovery {
	switch {
	case !podKnown:
		return recoverUnrecorded
	case rec == nil && f.Alive:
		return recoverOrphan
	case rec == nil:
		return recoverRemove
	case f.Alive && f.Attempt >= rec.Attempt:
		return recoverAdopt
	case f.Alive:
		return recoverKillSuperseded
	case rec.InstanceID == f.InstanceID && running(rec):
		return recoverReportExit
	}
	return recoverNothing
}

// reconnectInstance decides what becomes of an instance a runtime that
// came back (containerd reconnected) holds. Unlike at start, a record may
// be new since (the daemon ran on), so an instance is adopted only if it
// is the very one the record runs, and one no record knows is an orphan
// whether or not its pod is known.
func reconnectInstance(f runtime.Found, rec *lifecycle.Container) recovery {
	switch {
	case f.Followed:
		return recoverNothing
	case rec == nil && f.Alive:
		return recoverOrphan
	case rec == nil:
		return recoverRemove
	case rec.InstanceID == f.InstanceID && running(rec) && (f.Alive || f.Exit != nil):
		return recoverAdopt
	case f.Alive:
		return recoverKillSuperseded
	}
	return recoverDiscard
}

// untraced says whether a recorded instance of a runtime's pod is running
// or starting by the records though the runtime does not hold it: a
// reboot wiped its run state, or its shim died before recording. It ends
// as ContainerStatusUnknown.
func untraced(c *lifecycle.Container, found map[string]bool) bool {
	return running(c) && !found[c.InstanceID]
}

// rebuildable says whether a pod no record knows is rebuilt from what the
// runtimes hold: when something of it runs, or when the records were lost
// (its finished instances are then history worth keeping). Otherwise its
// instances are leftovers of a pod already forgotten, to remove.
func rebuildable(found []lifecycle.Found, recordsLost bool) bool {
	return recordsLost || anyAlive(found)
}

// anyAlive says whether any of a pod's found instances runs.
func anyAlive(found []lifecycle.Found) bool {
	for _, f := range found {
		if f.Alive {
			return true
		}
	}
	return false
}

func running(c *lifecycle.Container) bool {
	return c.Phase == lifecycle.Running || c.Phase == lifecycle.Starting
}
