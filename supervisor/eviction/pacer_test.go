package eviction

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

// TestEvictionPacing follows a spell of pressure look by look: reclaim
// first, then one victim at a time, the next only once the last is gone.
func TestEvictionPacing(t *testing.T) {
	alive := map[types.UID]bool{}
	live := func(uid types.UID) bool { return alive[uid] }
	victim := func(uid types.UID) *Victim { return &Victim{Pod: PodStats{UID: uid}} }
	var p Pacer
	type look struct {
		name      string
		met       bool
		choose    bool    // may a victim be chosen
		victim    *Victim // what Select returns, when asked
		reclaim   bool
		turn      Turn
		evicting  types.UID
		reclaimed bool
	}
	for _, l := range []look{
		{name: "no pressure", met: false},
		{name: "disk pressure: reclaim first", met: true, choose: true, reclaim: true, turn: TurnReclaim, reclaimed: true},
		{name: "still pressure: a victim", met: true, choose: true, victim: victim("a"), turn: TurnEvict, evicting: "a", reclaimed: true},
		{name: "a still runs: wait", met: true, choose: false, evicting: "a", reclaimed: true},
		{name: "a gone, none left to evict", met: true, choose: true, turn: TurnNoVictim, reclaimed: true},
		{name: "next victim", met: true, choose: true, victim: victim("b"), turn: TurnEvict, evicting: "b", reclaimed: true},
		{name: "pressure over while b runs: reclaim may run again next time", met: false, evicting: "b"},
		{name: "pressure again, b gone", met: true, choose: true, reclaim: true, turn: TurnReclaim, reclaimed: true},
	} {
		alive["a"] = l.name == "a still runs: wait" || l.name == "still pressure: a victim"
		alive["b"] = l.name == "pressure over while b runs: reclaim may run again next time"
		choose := p.Look(l.met, live)
		if choose != l.choose {
			t.Fatalf("%s: look says choose=%v, want %v", l.name, choose, l.choose)
		}
		if choose {
			if turn := p.Chose(l.victim, l.reclaim); turn != l.turn {
				t.Fatalf("%s: turn %v, want %v", l.name, turn, l.turn)
			}
		}
		if p.evicting != l.evicting || p.reclaimed != l.reclaimed {
			t.Fatalf("%s: evicting %q reclaimed %v, want %q %v", l.name, p.evicting, p.reclaimed, l.evicting, l.reclaimed)
		}
	}
}

func TestNextLook(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Minute)
	sooner := now.Add(50 * time.Millisecond)
	for _, tc := range []struct {
		name string
		next time.Time
		met  bool
		want time.Time
	}{
		{"no pressure, nothing asked", time.Time{}, false, time.Time{}},
		{"no pressure, the manager asks", later, false, later},
		{"pressure, nothing asked", time.Time{}, true, now.Add(PressureRecheck)},
		{"pressure, the manager asks later", later, true, now.Add(PressureRecheck)},
		{"pressure, the manager asks sooner", sooner, true, sooner},
	} {
		if got := NextLook(tc.next, now, tc.met); !got.Equal(tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
