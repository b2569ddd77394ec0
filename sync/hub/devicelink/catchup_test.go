package devicelink

import (
	"fmt"
	"testing"
	"time"
)

// A device catches up at most once per period, each device on its own.
func TestCatchUpGateOncePerPeriod(t *testing.T) {
	var g catchUpGate
	t0 := time.Unix(1000, 0)
	if !g.allow("gw-a", t0, stalledAfter) {
		t.Fatal("a device's first catch-up refused")
	}
	if g.allow("gw-a", t0.Add(stalledAfter-time.Millisecond), stalledAfter) {
		t.Fatal("a second catch-up within the period allowed")
	}
	if !g.allow("gw-b", t0.Add(time.Second), stalledAfter) {
		t.Fatal("another device's catch-up refused")
	}
	if !g.allow("gw-a", t0.Add(stalledAfter), stalledAfter) {
		t.Fatal("a catch-up once the period is over refused")
	}
}

// The gate remembers at most maxCatchUps devices: past it, those whose
// period is over go first, then the oldest.
func TestCatchUpGateBounded(t *testing.T) {
	var g catchUpGate
	t0 := time.Unix(1000, 0)
	for i := range maxCatchUps {
		g.allow(fmt.Sprintf("gw-%d", i), t0.Add(time.Duration(i)*time.Millisecond), time.Hour)
	}
	if !g.allow("gw-new", t0.Add(time.Minute), time.Hour) {
		t.Fatal("a new device refused by a full gate")
	}
	if len(g.last) != maxCatchUps {
		t.Fatalf("gate holds %d devices, want at most %d", len(g.last), maxCatchUps)
	}
	if _, ok := g.last["gw-0"]; ok {
		t.Fatal("the oldest device is still remembered")
	}
	if g.allow("gw-1", t0.Add(time.Minute), time.Hour) {
		t.Fatal("a remembered device within its period allowed")
	}
	// Past everyone's period, a new device clears the expired ones.
	g.allow("gw-later", t0.Add(2*time.Hour), time.Hour)
	if len(g.last) != 1 {
		t.Fatalf("gate holds %d devices after their periods, want 1", len(g.last))
	}
}
