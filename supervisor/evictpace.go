package supervisor

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/eviction"
)

// evictionPacer is node-pressure eviction's memory between looks, as the
// kubelet paces it: one victim at a time (the next is chosen only once the
// last one's processes are gone), and node-level reclaim once per spell
// of pressure before any pod is evicted for disk.
type evictionPacer struct {
	evicting  types.UID // the last victim, until its processes are gone
	reclaimed bool      // node-level reclaim done for the current pressure
}

// pressureRecheck is how often pressure is looked at while it lasts.
const pressureRecheck = 200 * time.Millisecond

// look starts a look at the signals: whether any threshold is met, and
// whether a pod still has processes. It says whether a victim may be
// chosen now.
func (p *evictionPacer) look(met bool, live func(types.UID) bool) (choose bool) {
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

// evictionTurn is what a look ends in once a victim may be chosen.
type evictionTurn int

const (
	// turnReclaim: remove finished containers, rotated logs and unused
	// images first.
	turnReclaim evictionTurn = iota + 1
	// turnNoVictim: a threshold is met but no pod may be evicted.
	turnNoVictim
	// turnEvict: evict the victim.
	turnEvict
)

// chose records what eviction.Manager.Select returned and says what to do.
func (p *evictionPacer) chose(victim *eviction.Victim, reclaim bool) evictionTurn {
	switch {
	case reclaim:
		p.reclaimed = true
		return turnReclaim
	case victim == nil:
		return turnNoVictim
	}
	p.evicting = victim.Pod.UID
	return turnEvict
}

// nextPressureLook is when to look at the signals again: when the
// eviction manager asks (next, zero for never) and, while a threshold is
// met, at least every pressureRecheck.
func nextPressureLook(next, now time.Time, met bool) time.Time {
	if !met {
		return next
	}
	if soon := now.Add(pressureRecheck); next.IsZero() || soon.Before(next) {
		return soon
	}
	return next
}
