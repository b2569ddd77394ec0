package probes

import (
	"context"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// A startup probe starts Unknown, as in the kubelet's worker: its failure
// threshold reached is a verdict (the container is killed), which a
// counter starting at "failed" never reported.
func TestStartupProbeFailureIsAVerdict(t *testing.T) {
	c := newCounter(&v1.Probe{SuccessThreshold: 1, FailureThreshold: 3}, lifecycle.Startup)
	for i, want := range []bool{false, false, true} {
		if got := c.observe(false); got != want {
			t.Fatalf("failure %d: changed=%v, want %v", i+1, got, want)
		}
	}
	// A startup probe that succeeds at once is a verdict too.
	c = newCounter(&v1.Probe{SuccessThreshold: 1, FailureThreshold: 3}, lifecycle.Startup)
	if !c.observe(true) {
		t.Fatal("first success of a startup probe not reported")
	}
}

// Liveness starts at Success (its failures must reach the threshold),
// readiness at Failure (its failures change nothing).
func TestInitialProbeResults(t *testing.T) {
	live := newCounter(&v1.Probe{SuccessThreshold: 1, FailureThreshold: 2}, lifecycle.Liveness)
	if live.observe(true) || live.observe(false) || !live.observe(false) {
		t.Fatal("liveness: want a verdict only at the second failure")
	}
	ready := newCounter(&v1.Probe{SuccessThreshold: 1, FailureThreshold: 1}, lifecycle.Readiness)
	if ready.observe(false) || !ready.observe(true) {
		t.Fatal("readiness: a failure before any success must change nothing, the first success must")
	}
}

// fakeContainer answers exec probes by their command, counting the runs.
type fakeContainer struct {
	mu    sync.Mutex
	runs  map[string]int
	fails map[string]bool
}

func (f *fakeContainer) exec(_ context.Context, command []string, _ time.Duration) (int, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs[command[0]]++
	if f.fails[command[0]] {
		return 1, "failing", nil
	}
	return 0, "", nil
}

func (f *fakeContainer) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[name]
}

func (f *fakeContainer) fail(name string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fails[name] = true
}

// waitFor polls cond until it holds, failing with what it waited for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

func execProbeOf(name string) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{name}}},
		PeriodSeconds: 1, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 1}
}

// Stopping liveness and startup (as at a container's stop) leaves its
// readiness probe running, and its verdicts still arrive; stopping with no
// kinds ends every probe.
func TestStopLivenessAndStartupKeepsReadiness(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx)
	m.TimeUnit = 10 * time.Millisecond
	f := &fakeContainer{runs: map[string]int{}, fails: map[string]bool{}}
	c := &v1.Container{Name: "app", LivenessProbe: execProbeOf("live"), ReadinessProbe: execProbeOf("ready")}
	m.Start("i1", c, Target{ExecIn: f.exec})
	waitFor(t, "both probes ran", func() bool { return f.count("live") > 0 && f.count("ready") > 0 })
	if r := <-m.Results(); r.Kind != lifecycle.Readiness || !r.OK {
		t.Fatalf("first verdict = %+v, want readiness success", r)
	}

	m.Stop("i1", lifecycle.Liveness, lifecycle.Startup)
	if m.probing("i1", lifecycle.Liveness) || !m.probing("i1", lifecycle.Readiness) {
		t.Fatalf("after stopping liveness and startup: liveness %v, readiness %v; want false, true",
			m.probing("i1", lifecycle.Liveness), m.probing("i1", lifecycle.Readiness))
	}
	live, ready := f.count("live"), f.count("ready")
	waitFor(t, "five more readiness runs", func() bool { return f.count("ready") >= ready+5 })
	if n := f.count("live"); n > live+1 { // one may have been in flight
		t.Fatalf("liveness ran %d times after it was stopped", n-live)
	}
	f.fail("ready")
	select {
	case r := <-m.Results():
		if r.Kind != lifecycle.Readiness || r.OK {
			t.Fatalf("verdict while stopping = %+v, want readiness failure", r)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not within 10s: the readiness failure verdict after liveness was stopped")
	}

	m.Stop("i1")
	if m.Running() != 0 || m.probing("i1", lifecycle.Readiness) {
		t.Fatalf("after stopping every probe: %d instances probed", m.Running())
	}
	ready = f.count("ready")
	time.Sleep(50 * time.Millisecond) // five periods: none may run
	if n := f.count("ready"); n > ready+1 {
		t.Fatalf("readiness ran %d times after every probe was stopped", n-ready)
	}
}

// A startup probe that succeeds after liveness was stopped must not start
// liveness again (only readiness).
func TestStoppedKindNeverRestarts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx)
	m.TimeUnit = 10 * time.Millisecond
	f := &fakeContainer{runs: map[string]int{}, fails: map[string]bool{}}
	m.Start("i1", &v1.Container{Name: "app", LivenessProbe: execProbeOf("live"), ReadinessProbe: execProbeOf("ready")}, Target{ExecIn: f.exec})
	m.Stop("i1", lifecycle.Liveness)
	// A second Start of the same instance (an adoption) adds nothing.
	m.Start("i1", &v1.Container{Name: "app", LivenessProbe: execProbeOf("live")}, Target{ExecIn: f.exec})
	w := &workers{m: m, id: "i1", spec: &v1.Container{LivenessProbe: execProbeOf("live"), ReadinessProbe: execProbeOf("ready")}, target: Target{ExecIn: f.exec}}
	w.startMain() // what a startup success does
	waitFor(t, "readiness ran", func() bool { return f.count("ready") > 2 })
	if m.probing("i1", lifecycle.Liveness) {
		t.Fatal("a stopped liveness probe was started again")
	}
	m.Stop("i1")
}
