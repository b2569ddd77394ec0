package lifecycle

import (
	"encoding/json"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

const year = 365 * 24 * time.Hour

// crashLoop lets container c of pod u exit with code 1 n times, each time
// waiting out the backoff, and returns the restarts seen.
func crashLoop(h *harness, n int) int {
	starts := 0
	for range n {
		h.exit("u", "c", 1)
		for i := 0; i < 20 && h.container("u", "c").Phase != Running; i++ {
			starts += len(kinds(h.advance(30*time.Second), Start))
		}
	}
	return starts
}

func TestCrashLoopKeepsRestartingAfterTheClockStepsBackAYear(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	crashLoop(h, 4) // backoff is now well under way
	h.now = h.now.Add(-year)
	// The container exits after the step: its finish is in the "past"
	// of the new clock, its last start a year in the future.
	h.exit("u", "c", 1)
	waited := time.Duration(0)
	for h.container("u", "c").Phase != Running {
		if waited > DefaultConfig().BackoffMax {
			t.Fatalf("no restart within the 5 min backoff cap after a step back: %+v", h.container("u", "c"))
		}
		h.advance(10 * time.Second)
		waited += 10 * time.Second
	}
	if wake := h.wake; !wake.IsZero() && wake.Sub(h.now) > DefaultConfig().BackoffMax {
		t.Fatalf("next wake %s away", wake.Sub(h.now))
	}
	// And it keeps going.
	if n := crashLoop(h, 3); n != 3 {
		t.Fatalf("%d restarts in 3 crashes after the step", n)
	}
	assertNoFutureTimes(t, h, "u")
}

func TestRestoredFutureTimesAreClamped(t *testing.T) {
	// A record written before the clock stepped back a year: every time
	// in it is a year ahead, and the next restart "a year away".
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	crashLoop(h, 5)
	h.exit("u", "c", 1)
	h.reconcile() // now waiting in backoff
	in := roundTrip(t, h.m.Instance("u"))
	if c := in.Container("c"); c.Phase != Waiting || !c.NotBefore.After(h.now) {
		t.Fatalf("setup: want a container waiting in backoff, got %+v", c)
	}

	before := in.Container("c").RestartCount
	r := newHarness(t)
	r.now = h.now.Add(-year)
	r.m.Restore(in, r.now)
	r.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	r.reconcile()
	assertNoFutureTimes(t, r, "u")
	st := r.status("u")
	if st.StartTime == nil || st.StartTime.After(r.now) {
		t.Fatalf("startTime %v is after now %v: ages would be negative", st.StartTime, r.now)
	}
	waited := time.Duration(0)
	for r.container("u", "c").Phase != Running {
		if waited > DefaultConfig().BackoffMax {
			t.Fatalf("restored backoff not capped at 5 min: %+v", r.container("u", "c"))
		}
		r.advance(10 * time.Second)
		waited += 10 * time.Second
	}
	// The count goes on from the record: the restart is one more.
	if got := r.container("u", "c").RestartCount; got != before+1 {
		t.Fatalf("restartCount %d after restore and a restart, want %d", got, before+1)
	}
}

func TestActiveDeadlineAcrossClockSteps(t *testing.T) {
	deadline := int64(3600)
	withDeadline := func() *v1.Pod {
		p := pod("p", "u", v1.RestartPolicyAlways, "c")
		p.Spec.ActiveDeadlineSeconds = &deadline
		return p
	}
	t.Run("step back: the deadline counts from now, not a year on", func(t *testing.T) {
		h := newHarness(t)
		h.m.SetDesired([]*v1.Pod{withDeadline()})
		h.reconcile()
		h.now = h.now.Add(-year)
		h.advance(time.Minute)
		if h.m.Instance("u").Failed != nil {
			t.Fatal("failed on a step back")
		}
		h.advance(time.Duration(deadline) * time.Second)
		if f := h.m.Instance("u").Failed; f == nil || f.Reason != "DeadlineExceeded" {
			t.Fatalf("deadline never came after a step back: %+v", f)
		}
	})
	t.Run("step forward: as the kubelet, wall time since startTime", func(t *testing.T) {
		h := newHarness(t)
		h.m.SetDesired([]*v1.Pod{withDeadline()})
		h.reconcile()
		h.advance(time.Minute)
		if h.m.Instance("u").Failed != nil {
			t.Fatal("failed before the deadline")
		}
		h.now = h.now.Add(year)
		h.reconcile()
		if f := h.m.Instance("u").Failed; f == nil || f.Reason != "DeadlineExceeded" {
			t.Fatalf("the kubelet fails a pod whose wall-clock age passed the deadline; got %+v", f)
		}
	})
}

func TestStopDeadlineCappedAfterAStepBack(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	h.m.SetDesired(nil)
	h.reconcile() // SIGTERM sent, SIGKILL due in 30s
	h.now = h.now.Add(-year)
	var kills int
	for range 4 {
		kills += len(kinds(h.advance(10*time.Second), Kill))
	}
	if kills != 1 {
		t.Fatalf("SIGKILL after the 30s grace period: %d kills (waiting a year?)", kills)
	}
}

func roundTrip(t *testing.T, in *Instance) *Instance {
	t.Helper()
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Instance
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return &out
}

func assertNoFutureTimes(t *testing.T, h *harness, uid string) {
	t.Helper()
	in := h.m.Instance(types.UID(uid))
	check := func(what string, at time.Time) {
		if at.After(h.now) {
			t.Errorf("%s %v is after now %v", what, at, h.now)
		}
	}
	check("created", in.Created)
	check("startTime", in.StartTime)
	for typ, tr := range in.Transitions {
		check(string(typ)+" lastTransitionTime", tr.At)
	}
	for _, c := range in.AllContainers() {
		check(c.Name+" startedAt", c.StartedAt)
		if c.Last != nil {
			check(c.Name+" last finishedAt", c.Last.FinishedAt)
		}
		if c.NotBefore.Sub(h.now) > DefaultConfig().BackoffMax {
			t.Errorf("%s waits %s", c.Name, c.NotBefore.Sub(h.now))
		}
	}
}

func TestWakeIn(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		at   time.Time
		want time.Duration
	}{
		{time.Time{}, time.Hour},                    // nothing to wake for
		{now.Add(3 * time.Second), 3 * time.Second}, // ahead
		{now.Add(-time.Second), 0},                  // already due
	} {
		if got := WakeIn(tc.at, now); got != tc.want {
			t.Errorf("WakeIn(%v) = %s, want %s", tc.at, got, tc.want)
		}
	}
}

// The longest stop is the longest grace period a stop would give, the
// 30 s default where a pod names none, and never below the minimum.
func TestLongestGrace(t *testing.T) {
	m := NewMachine(DefaultConfig())
	if got := m.LongestGrace(); got != 2*time.Second {
		t.Errorf("no pods: %s, want the 2s minimum", got)
	}
	short, unset := int64(1), pod("unset", "u1", v1.RestartPolicyAlways, "app")
	p := pod("short", "u2", v1.RestartPolicyAlways, "app")
	p.Spec.TerminationGracePeriodSeconds = &short
	m.SetDesired([]*v1.Pod{p, unset})
	m.Ready(time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC))
	if got := m.LongestGrace(); got != 30*time.Second {
		t.Errorf("pods with 1s and no grace period: %s, want the 30s default", got)
	}
}
