package sdnotify

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// facts returns f, counting the looks.
func facts(f *Facts, looks *int) func() Facts {
	return func() Facts { *looks++; return *f }
}

func step(t *testing.T, n *Notifier, now time.Time, f func() Facts, want string) {
	t.Helper()
	n.Changed()
	if got := n.Step(now, f); got != want {
		t.Fatalf("at +%s: sent %q, want %q", now.Sub(t0), got, want)
	}
}

// A start-up: progress while recovering, no ping before the loop runs,
// then READY with the first running status and a ping; pings every half
// watchdog period from then on, and nothing else while nothing changes.
func TestStartUpThenPings(t *testing.T) {
	n := New(30 * time.Second)
	var looks int
	f := &Facts{Pods: 5, NotReady: 2}
	facts := facts(f, &looks)
	step(t, n, at(0), facts, "STATUS=recovering: restoring pod records")
	n.Recovering(0, 5)
	step(t, n, at(100*time.Millisecond), facts, "") // within StatusGap
	n.Recovering(3, 5)
	step(t, n, at(time.Second), facts, "STATUS=recovering: adopted 3 of 5 pods")
	if !n.Next().IsZero() {
		t.Errorf("recovering: next wake %s, want none (no loop runs)", n.Next())
	}
	if looks != 0 {
		t.Fatalf("facts read %d times while recovering", looks)
	}
	n.Recovering(5, 5)
	n.Supervising(at(1100*time.Millisecond), nil, time.Minute)
	step(t, n, at(1100*time.Millisecond), facts, "READY=1\nSTATUS=running 5 pods (2 not ready)\nWATCHDOG=1")
	step(t, n, at(2200*time.Millisecond), facts, "") // the same status
	if got, want := n.Next(), at(16100*time.Millisecond); !got.Equal(want) {
		t.Errorf("next wake +%s, want +16.1s (half the watchdog period after the ping)", got.Sub(t0))
	}
	step(t, n, at(16*time.Second), facts, "")
	step(t, n, at(16100*time.Millisecond), facts, "WATCHDOG=1")
	f.NotReady = 0
	step(t, n, at(17200*time.Millisecond), facts, "STATUS=running 5 pods")
	if looks != 4 {
		t.Errorf("facts read %d times, want 4 (once per StatusGap at most)", looks)
	}
}

// Status lines are bounded to one per StatusGap: a change inside it waits
// for the gap's end, and the loop is woken for it.
func TestStatusRateBounded(t *testing.T) {
	n := New(0)
	f := &Facts{Pods: 1, NotReady: 1}
	var looks int
	facts := facts(f, &looks)
	n.Supervising(t0, nil, time.Minute)
	step(t, n, at(0), facts, "READY=1\nSTATUS=running 1 pod (1 not ready)")
	for i := 1; i < 10; i++ {
		f.Pods, f.NotReady = 1+i, i
		step(t, n, at(time.Duration(i)*50*time.Millisecond), facts, "")
	}
	if got := n.Next(); !got.Equal(at(StatusGap)) {
		t.Fatalf("next wake +%s, want +1s for the held-back line", got.Sub(t0))
	}
	if got := n.Step(at(StatusGap), facts); got != "STATUS=running 10 pods (9 not ready)" {
		t.Fatalf("at +1s sent %q, want the newest status", got)
	}
	if !n.Next().IsZero() {
		t.Errorf("next wake +%s, want none: no watchdog, nothing changed", n.Next().Sub(t0))
	}
	if looks != 2 {
		t.Errorf("facts read %d times in a second of changes, want 2", looks)
	}
	f.Finished, f.Rejected, f.Draining = 2, 1, true
	step(t, n, at(3*time.Second), facts, "STATUS=running 10 pods (9 not ready, 2 finished), 1 manifest rejected, draining")
}

// READY waits for the runtimes that hold restored pods to list them, or
// for the wait's end, and the status says which it still waits for.
func TestReadyWaitsForRuntimes(t *testing.T) {
	n := New(10 * time.Second)
	nothing := func() Facts { return Facts{} }
	n.Supervising(t0, []string{"containerd"}, 30*time.Second)
	step(t, n, at(0), nothing, "STATUS=recovering: waiting for containerd to adopt its pods\nWATCHDOG=1")
	if got := n.Next(); !got.Equal(at(5 * time.Second)) {
		t.Fatalf("next wake +%s, want +5s (a ping)", got.Sub(t0))
	}
	n.Adopted("process") // not awaited
	step(t, n, at(2*time.Second), nothing, "")
	n.Adopted("containerd")
	step(t, n, at(3*time.Second), nothing, "READY=1\nSTATUS=running 0 pods")

	n = New(0)
	n.Supervising(t0, []string{"containerd"}, 30*time.Second)
	step(t, n, at(0), nothing, "STATUS=recovering: waiting for containerd to adopt its pods")
	if got := n.Next(); !got.Equal(at(30 * time.Second)) {
		t.Fatalf("next wake +%s, want +30s (the wait's end)", got.Sub(t0))
	}
	step(t, n, at(30*time.Second), nothing, "READY=1\nSTATUS=running 0 pods, waiting for containerd")
	n.Adopted("containerd") // late
	step(t, n, at(40*time.Second), nothing, "STATUS=running 0 pods")
}

// STOPPING goes at once, with its status, however recent the last line;
// a stop that stops the pods counts those left.
func TestStopping(t *testing.T) {
	f := &Facts{Pods: 4, Finished: 1}
	var looks int
	n := New(0)
	n.Supervising(t0, nil, 0)
	step(t, n, at(0), facts(f, &looks), "READY=1\nSTATUS=running 4 pods (1 finished)")
	n.Stopping(true)
	step(t, n, at(10*time.Millisecond), facts(f, &looks), "STOPPING=1\nSTATUS=stopping: 3 pods left")
	f.Pods = 2
	step(t, n, at(20*time.Millisecond), facts(f, &looks), "")
	step(t, n, at(StatusGap+10*time.Millisecond), facts(f, &looks), "STATUS=stopping: 1 pod left")

	n = New(0)
	n.Supervising(t0, nil, 0)
	step(t, n, at(0), facts(f, &looks), "READY=1\nSTATUS=running 2 pods (1 finished)")
	n.Stopping(false)
	step(t, n, at(0), facts(f, &looks), "STOPPING=1\nSTATUS=stopping: leaving 1 pod running")
}

// A restart into another version (the self-update) is a reload: the
// process stays, its pods run on, and the next daemon sends READY again.
func TestReloading(t *testing.T) {
	f := &Facts{Pods: 3}
	var looks int
	n := New(0)
	n.Supervising(t0, nil, 0)
	step(t, n, at(0), facts(f, &looks), "READY=1\nSTATUS=running 3 pods")
	n.Reloading()
	step(t, n, at(10*time.Millisecond), facts(f, &looks), "RELOADING=1\nSTATUS=restarting into a new version: leaving 3 pods running")

	// With a watchdog, a ping goes with it however recent the last one:
	// the next daemon gets a whole period to start.
	n = New(30 * time.Second)
	n.Supervising(t0, nil, 0)
	step(t, n, at(0), facts(f, &looks), "READY=1\nSTATUS=running 3 pods\nWATCHDOG=1")
	n.Reloading()
	step(t, n, at(time.Second), facts(f, &looks), "RELOADING=1\nSTATUS=restarting into a new version: leaving 3 pods running\nWATCHDOG=1")
}

// With a hub, the line says whether it is connected and which generation
// is in force, and changes as the connection does.
func TestStatusWithHub(t *testing.T) {
	n := New(0)
	var looks int
	f := &Facts{Pods: 2, Hub: &Hub{}}
	facts := facts(f, &looks)
	n.Supervising(at(0), nil, time.Minute)
	step(t, n, at(0), facts, "READY=1\nSTATUS=running 2 pods; hub connecting")
	*f.Hub = Hub{Connected: true, Since: at(time.Second)}
	step(t, n, at(time.Second), facts, "STATUS=running 2 pods; hub connected")
	f.Hub.Generation = 7
	step(t, n, at(2*time.Second), facts, "STATUS=running 2 pods; hub connected, generation 7")
	lost := time.Date(2026, 11, 28, 10, 42, 30, 0, time.UTC)
	*f.Hub = Hub{Since: lost, Generation: 7}
	f.NotReady = 1
	step(t, n, at(3*time.Second), facts, "STATUS=running 2 pods (1 not ready); hub unreachable since 10:42, generation 7")
	// Shown in the time zone of the clock the loop runs on.
	f.Hub.Since = lost.In(time.FixedZone("CET", 3600))
	step(t, n, at(4*time.Second), facts, "")
	// Lost on another day: the date too.
	f.Hub.Since = lost.Add(-24 * time.Hour)
	step(t, n, at(5*time.Second), facts, "STATUS=running 2 pods (1 not ready); hub unreachable since Nov 27 10:42, generation 7")
	// Never reached since the start: since the first failure.
	*f.Hub = Hub{Since: at(-time.Hour)}
	step(t, n, at(6*time.Second), facts, "STATUS=running 2 pods (1 not ready); hub unreachable since 11:00")
}
