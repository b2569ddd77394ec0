package eviction

import (
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// Pacer is node-pressure eviction's memory between looks, as the kubelet
// paces it: one victim at a time (the next is chosen only once the
// last one's processes are gone), and node-level reclaim once per spell
// of pressure before any pod is evicted for disk.
type Pacer struct {
	evicting  types.UID // the last victim, until its processes are gone
	reclaimed bool      // node-level reclaim done for the current pressure
}

// Reclaimed says whether node-level reclaim ran in the current spell of
// pressure (Manager.Select's reclaimedNodeLevel).
func (p *Pacer) Reclaimed() bool { return p.reclaimed }

// PressureRecheck is how often pressure is looked at while it lasts.
const PressureRecheck = 200 * time.Millisecond

// Look starts a look at the signals: whether any threshold is met, and
// whether a pod still has processes. It says whether a victim may be
// chosen now.
func (p *Pacer) Look(met bool, live func(types.UID) bool) (choose bool) {
	if !met {
		p.reclaimed = false
		return false
	}
	if p.evicting != "" && live(p.evicting) {
		return false // one pod at a time: wait for the last victim to go
	}
	p.evicting = ""
	return true
}

// Turn is what a look ends in once a victim may be chosen.
type Turn int

const (
	// TurnReclaim: remove finished containers, rotated logs and unused
	// images first.
	TurnReclaim Turn = iota + 1
	// TurnNoVictim: a threshold is met but no pod may be evicted.
	TurnNoVictim
	// TurnEvict: evict the victim.
	TurnEvict
)

// Chose records what Manager.Select returned and says what to do.
func (p *Pacer) Chose(victim *Victim, reclaim bool) Turn {
	switch {
	case reclaim:
		p.reclaimed = true
		return TurnReclaim
	case victim == nil:
		return TurnNoVictim
	}
	p.evicting = victim.Pod.UID
	return TurnEvict
}

// NextLook is when to look at the signals again: when the
// eviction manager asks (next, zero for never) and, while a threshold is
// met, at least every PressureRecheck.
func NextLook(next, now time.Time, met bool) time.Time {
	if !met {
		return next
	}
	if soon := now.Add(PressureRecheck); next.IsZero() || soon.Before(next) {
		return soon
	}
	return next
}
