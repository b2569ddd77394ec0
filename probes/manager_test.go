package probes

import (
	"testing"

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
