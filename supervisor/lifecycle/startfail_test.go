package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A container whose image cannot be pulled waits with ErrImagePull, then
// ImagePullBackOff, retried on the backoff's schedule; none of it counts
// as a restart, and the first successful start clears it.
func TestStartFailedBacksOffWithoutRestarts(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	acts := h.step(h.now)
	starts := kinds(acts, Start)
	if len(starts) != 1 {
		t.Fatalf("want one start, got %v", acts)
	}
	fail := func(a Action) {
		t.Helper()
		acts := h.m.StartFailed(types.UID("u"), "app", a.InstanceID, ErrImagePull, "registry unreachable", h.now)
		if len(kinds(acts, Record)) == 0 {
			t.Fatalf("no event for a failed pull: %v", acts)
		}
	}
	fail(starts[0])
	waiting := func() *v1.ContainerStateWaiting {
		st := h.m.PodView(h.m.Instance("u"), h.now).Status
		cs := st.ContainerStatuses[0]
		if cs.RestartCount != 0 || cs.State.Waiting == nil || st.Phase != v1.PodPending {
			t.Fatalf("status %+v: want Pending, waiting, no restarts", st)
		}
		return cs.State.Waiting
	}
	if w := waiting(); w.Reason != ErrImagePull || w.Message != "registry unreachable" {
		t.Fatalf("after the first failure: %+v", w)
	}
	// Nothing is tried again before the backoff ends.
	if got := kinds(h.step(h.now.Add(9*time.Second)), Start); len(got) != 0 {
		t.Fatalf("retried during the backoff: %v", got)
	}
	if next := h.wake; !next.Equal(h.now.Add(10 * time.Second)) {
		t.Fatalf("next wake %v, want the end of a 10s backoff", next)
	}
	h.now = h.now.Add(10 * time.Second)
	starts = kinds(h.step(h.now), Start)
	if len(starts) != 1 || starts[0].Attempt != 2 {
		t.Fatalf("want a second attempt after 10s, got %v", starts)
	}
	fail(starts[0])
	if w := waiting(); w.Reason != ImagePullBackOff {
		t.Fatalf("after the second failure: %+v, want ImagePullBackOff", w)
	}
	// The backoff doubles: 20s now.
	if got := kinds(h.step(h.now.Add(19*time.Second)), Start); len(got) != 0 {
		t.Fatalf("retried before 20s: %v", got)
	}
	h.now = h.now.Add(20 * time.Second)
	starts = kinds(h.step(h.now), Start)
	if len(starts) != 1 {
		t.Fatalf("no third attempt: %v", starts)
	}
	h.m.Started("u", "app", starts[0].InstanceID, h.now)
	c := h.container("u", "app")
	if c.WaitReason != "" || c.FailStep != 0 || c.RestartCount != 0 || c.Phase != Running {
		t.Fatalf("after a successful start: %+v", c)
	}
}

// A failure reported for an instance that is no longer starting changes
// nothing.
func TestStartFailedIgnoresStaleInstances(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	if acts := h.m.StartFailed("u", "app", "u_app_9", ErrImagePull, "x", h.now); len(acts) != 0 {
		t.Fatalf("stale failure acted on: %v", acts)
	}
	if c := h.container("u", "app"); c.Phase != Running {
		t.Fatalf("phase %s, want Running", c.Phase)
	}
}

// A new image ends the pull backoff at once; other waits keep theirs.
func TestRetryWaitingEndsPullBackoff(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app", "other")})
	acts := kinds(h.step(h.now), Start)
	h.m.StartFailed("u", acts[0].Container, acts[0].InstanceID, "ErrImageNeverPull", "not present", h.now)
	h.m.StartFailed("u", acts[1].Container, acts[1].InstanceID, "CreateContainerError", "bad", h.now)
	h.now = h.now.Add(time.Second)
	// An image that arrived before the failures retries nothing.
	h.m.RetryWaiting(h.now.Add(-2*time.Second), h.now, ErrImagePull, "ErrImageNeverPull")
	if starts := kinds(h.step(h.now), Start); len(starts) != 0 {
		t.Fatalf("retried for an older image: %v", starts)
	}
	h.m.RetryWaiting(h.now, h.now, ErrImagePull, "ErrImageNeverPull")
	starts := kinds(h.step(h.now), Start)
	if len(starts) != 1 || starts[0].Container != acts[0].Container {
		t.Fatalf("after new images: %v, want only %s retried", starts, acts[0].Container)
	}
}

// A start that waits for its volumes shows ContainerCreating, records the
// kubelet's FailedMount warning and nothing else, and is tried again on
// the kubelet's volume backoff (500 ms doubling to 2m2s) or as soon as
// the objects change.
func TestMountFailedWaitsInContainerCreating(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	starts := kinds(h.step(h.now), Start)
	msg := `MountVolume.SetUp failed for volume "cfg" : configmap "app" not found`
	fail := func(a Action) {
		t.Helper()
		acts := h.m.StartFailed("u", "app", a.InstanceID, FailedMount, msg, h.now)
		recs := kinds(acts, Record)
		if len(acts) != 1 || len(recs) != 1 || recs[0].EventType != "Warning" || recs[0].Reason != FailedMount || recs[0].Message != msg {
			t.Fatalf("actions %+v, want one FailedMount warning", acts)
		}
	}
	fail(starts[0])
	st := h.m.PodView(h.m.Instance("u"), h.now).Status
	cs := st.ContainerStatuses[0]
	if w := cs.State.Waiting; w == nil || w.Reason != "ContainerCreating" || w.Message != "" || cs.RestartCount != 0 || st.Phase != v1.PodPending {
		t.Fatalf("status %+v: want Pending, ContainerCreating without a message", st)
	}
	for i, wait := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second} {
		if got := kinds(h.step(h.now.Add(wait-time.Millisecond)), Start); len(got) != 0 {
			t.Fatalf("failure %d: retried before %v", i+1, wait)
		}
		h.now = h.now.Add(wait)
		starts = kinds(h.step(h.now), Start)
		if len(starts) != 1 {
			t.Fatalf("failure %d: not retried after %v", i+1, wait)
		}
		fail(starts[0])
	}
	if got := mountBackoff(100); got != 2*time.Minute+2*time.Second {
		t.Fatalf("backoff capped at %v, want 2m2s", got)
	}
	// The objects changed: tried at once.
	h.now = h.now.Add(time.Millisecond)
	h.m.RetryWaiting(h.now, h.now, FailedMount)
	starts = kinds(h.step(h.now), Start)
	if len(starts) != 1 {
		t.Fatal("not retried when the objects changed")
	}
	h.m.Started("u", "app", starts[0].InstanceID, h.now)
	if c := h.container("u", "app"); c.WaitReason != "" || c.FailStep != 0 || c.Phase != Running {
		t.Fatalf("after a successful start: %+v", c)
	}
}

// A container whose configuration cannot be made waits with
// CreateContainerConfigError and the kubelet's one event, Failed "Error:
// <message>"; it is not a restart.
func TestConfigErrorEvents(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	starts := kinds(h.step(h.now), Start)
	acts := h.m.StartFailed(types.UID("u"), "app", starts[0].InstanceID, CreateContainerConfigError, `configmap "app" not found`, h.now)
	recs := kinds(acts, Record)
	if len(recs) != 1 || recs[0].EventType != "Warning" || recs[0].Reason != "Failed" || recs[0].Message != `Error: configmap "app" not found` {
		t.Fatalf("events %+v", recs)
	}
	cs := h.m.PodView(h.m.Instance("u"), h.now).Status.ContainerStatuses[0]
	if w := cs.State.Waiting; w == nil || w.Reason != CreateContainerConfigError || w.Message != `configmap "app" not found` || cs.RestartCount != 0 {
		t.Fatalf("status %+v", cs)
	}
}
