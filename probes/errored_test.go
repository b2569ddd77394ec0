package probes

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// execOutcome is what one exec probe run gets from the fake runtime.
type execOutcome struct {
	code int
	err  error
}

// A run the runtime could not make (containerd away, an exec not
// started) is the kubelet's probe.Unknown: its result is thrown away, so
// no verdict changes and no threshold counts it; one Unhealthy warning
// says so at the first of a streak.
func TestErroredRunsChangeNoVerdict(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := NewManager(ctx)
	m.TimeUnit = 10 * time.Millisecond
	runs := make(chan execOutcome)
	tgt := target
	tgt.ExecIn = func(ctx context.Context, _ []string, _ time.Duration) (int, string, error) {
		select {
		case o := <-runs:
			return o.code, "", o.err
		case <-ctx.Done():
			return 0, "", ctx.Err()
		}
	}
	c := &v1.Container{Name: "app", LivenessProbe: &v1.Probe{
		ProbeHandler:  v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"check"}}},
		PeriodSeconds: 1, TimeoutSeconds: 100, SuccessThreshold: 1, FailureThreshold: 2}}
	m.Start("inst", c, tgt)
	defer m.Stop("inst")

	// run hands the worker its next run's outcome: it takes it only once
	// it has handled the run before (a worker blocked on a result it
	// sends would not).
	run := func(o execOutcome) {
		t.Helper()
		select {
		case runs <- o:
		case <-time.After(5 * time.Second):
			t.Fatal("the worker did not run its probe again within 5s")
		}
	}
	unknown := execOutcome{err: fmt.Errorf("%w: containerd: connection refused", ErrUnknown)}
	erroredWarning := func(what string) {
		t.Helper()
		r := next(t, m)
		if !r.Errored || !r.WarningOnly || r.Kind != lifecycle.Liveness ||
			!strings.HasPrefix(r.Warning, "Liveness probe errored and resulted in unknown state: ") || !strings.Contains(r.Warning, "connection refused") {
			t.Fatalf("%s: got %+v, want the errored warning", what, r)
		}
	}

	run(unknown)
	erroredWarning("the first errored run")
	for range 4 { // a streak: no more warnings, no verdict (threshold 2)
		run(unknown)
	}
	run(execOutcome{}) // a success ends the streak
	select {
	case r := <-m.Results():
		t.Fatalf("a result during the errored streak: %+v", r)
	default:
	}
	run(unknown)
	erroredWarning("a new streak")
	// Two real failures make the verdict: the errored runs between
	// counted for nothing.
	run(execOutcome{code: 1})
	run(unknown)
	erroredWarning("an errored run after a failure")
	run(execOutcome{code: 1})
	r := next(t, m)
	if r.Errored || r.WarningOnly || r.OK || r.Kind != lifecycle.Liveness || !strings.Contains(r.Message, "exit status 1") {
		t.Fatalf("got %+v, want the liveness failure verdict", r)
	}
}
