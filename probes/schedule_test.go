package probes

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Periodic runs of probes started apart fall on the same grid time, so an
// idle daemon wakes once for all of them: two pods started 0.4 s apart
// with a 10 s period probe together at the next whole second, and again
// exactly a period later.
func TestPeriodicProbesShareWakeUps(t *testing.T) {
	m, clk := listenManager(t)
	s := newServer(t)
	s.listen(t)
	probe := tcpProbe(intstr.FromInt(s.port), 10, 0, 1)
	clk.advance(300 * time.Millisecond) // 1000.3 s
	m.Start("i1", &v1.Container{Name: "app", ReadinessProbe: probe}, s.target())
	waitFor(t, "the first worker armed its timer", func() bool { return clk.armed() == 1 })
	clk.advance(400 * time.Millisecond) // 1000.7 s
	m.Start("i2", &v1.Container{Name: "app", ReadinessProbe: probe}, s.target())
	waitFor(t, "the second worker armed its timer", func() bool { return clk.armed() == 2 })

	clk.advance(299 * time.Millisecond) // 1000.999 s
	noResult(t, m, "a run before the grid time")
	clk.advance(time.Millisecond) // 1001 s: both run
	for range 2 {
		if r := nextResult(t, m, "both readiness successes at the grid time"); !r.OK {
			t.Fatalf("verdict = %+v, want success", r)
		}
	}
	waitFor(t, "both workers armed their next period", func() bool { return clk.armed() == 2 && s.dials.Load() == 2 })
	clk.advance(10*time.Second - time.Millisecond)
	if d := s.dials.Load(); d != 2 {
		t.Fatalf("%d runs before a period passed, want 2", d)
	}
	clk.advance(time.Millisecond)
	waitFor(t, "both periodic runs a period later", func() bool { return s.dials.Load() == 4 })
}

func TestProbeGrid(t *testing.T) {
	for _, tc := range []struct{ period, unit, want time.Duration }{
		{10 * time.Second, time.Second, time.Second},
		{300 * time.Second, time.Second, time.Second},
		{time.Second, time.Second, 100 * time.Millisecond},
		{5 * time.Second, time.Second, 500 * time.Millisecond},
		{10 * time.Millisecond, 10 * time.Millisecond, time.Millisecond},
		{0, time.Second, time.Millisecond},
	} {
		if got := probeGrid(tc.period, tc.unit); got != tc.want {
			t.Errorf("probeGrid(%v, %v) = %v, want %v", tc.period, tc.unit, got, tc.want)
		}
	}
}

func TestNextDue(t *testing.T) {
	at := func(ms int64) time.Time { return time.UnixMilli(1_000_000 + ms) }
	const period, grid = 10 * time.Second, time.Second
	for _, tc := range []struct {
		name     string
		due, now time.Time
		poked    bool
		want     time.Time
	}{
		// A timed run keeps its phase whatever it took: the kubelet's
		// ticker, not "a period after the run ended".
		{"timed run", at(0), at(3), false, at(10_000)},
		{"slow timed run", at(0), at(4_000), false, at(10_000)},
		// A run longer than the period skips the periods it overlapped.
		{"overlong run", at(0), at(12_300), false, at(20_000)},
		{"run ending on a period", at(0), at(10_000), false, at(20_000)},
		// A poked run: a period after it, on the grid.
		{"poked run", at(0), at(4_250), true, at(15_000)},
		{"poked run on the grid", at(0), at(4_000), true, at(14_000)},
		// The wall clock set back an hour: a period from now, not an hour.
		{"clock set back", at(3_600_000), at(5), false, at(11_000)},
	} {
		if got := nextDue(tc.due, tc.now, period, grid, tc.poked); !got.Equal(tc.want) {
			t.Errorf("%s: nextDue = %v, want %v", tc.name, got.Sub(at(0)), tc.want.Sub(at(0)))
		}
	}
}

func TestUntilBoundsWallClockJumps(t *testing.T) {
	now := time.Unix(1000, 0)
	if got := until(now, now.Add(-time.Hour), 11*time.Second); got != 0 {
		t.Errorf("due in the past: wait %v, want 0", got)
	}
	if got := until(now, now.Add(time.Hour), 11*time.Second); got != 11*time.Second {
		t.Errorf("due an hour ahead: wait %v, want the limit 11s", got)
	}
	if got := until(now, now.Add(3*time.Second), 11*time.Second); got != 3*time.Second {
		t.Errorf("due in 3s: wait %v, want 3s", got)
	}
}
