package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// The tests in this file pin values the kubelet shows, item by item of
// issue 13, on a fake clock.

// The kubelet gives restart count N to the container it creates as the
// N+1th (kuberuntime startContainer: the last status's count plus one),
// and the status shows the newest container's count: waiting in
// CrashLoopBackOff after the second run shows 1, not 2.
func TestRestartCountIsGivenAtTheRestart(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("crash", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	rc := func() int32 { return h.status("u").ContainerStatuses[0].RestartCount }
	if got := rc(); got != 0 {
		t.Fatalf("first run: restartCount %d, want 0", got)
	}
	h.now = h.now.Add(time.Second)
	// The first exit restarts at once: the second instance is restart 1.
	if acts := h.exit("u", "c", 1); len(kinds(acts, Start)) != 1 {
		t.Fatalf("no immediate restart: %+v", acts)
	}
	if got := rc(); got != 1 {
		t.Fatalf("second run: restartCount %d, want 1", got)
	}
	h.now = h.now.Add(time.Second)
	h.exit("u", "c", 1)
	cs := h.status("u").ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.RestartCount != 1 {
		t.Fatalf("after the second run: state %+v restartCount %d, want CrashLoopBackOff with 1", cs.State, cs.RestartCount)
	}
	// A start that is issued but not yet answered changes nothing shown.
	h.now = h.now.Add(10 * time.Second)
	if acts := h.m.Reconcile(h.now); len(kinds(acts, Start)) != 1 {
		t.Fatalf("no restart after the backoff: %+v", acts)
	}
	if got := rc(); got != 1 {
		t.Fatalf("third start in flight: restartCount %d, want 1", got)
	}
	c := h.container("u", "c")
	h.m.Started("u", "c", c.InstanceID, h.now)
	if got := rc(); got != 2 {
		t.Fatalf("third run: restartCount %d, want 2", got)
	}
}

// An instance that was created but could not start (StartError, exit 128)
// is a container the kubelet counts: the next one is a restart.
func TestStartErrorCountsAsACreatedInstance(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	acts := h.m.Reconcile(h.now)
	id := kinds(acts, Start)[0].InstanceID
	h.m.Exited("u", "c", Termination{InstanceID: id, ExitCode: 128, Reason: "StartError", Message: "exec: no such file", FinishedAt: h.now})
	if got := h.status("u").ContainerStatuses[0].RestartCount; got != 0 {
		t.Fatalf("after the first StartError: restartCount %d, want 0", got)
	}
	h.reconcile() // restarted at once, and answered
	if got := h.status("u").ContainerStatuses[0].RestartCount; got != 1 {
		t.Fatalf("second instance: restartCount %d, want 1", got)
	}
}
