package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// A start that meets objects still on their way from the hub waits
// quietly: no event, no failure counted, the default waiting state; it
// is tried again when objects change (RetryWaiting), or at the recheck.
func TestObjectsPendingWaitsQuietly(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	starts := kinds(h.step(h.now), Start)
	if len(starts) != 1 {
		t.Fatalf("want one start, got %v", starts)
	}
	if acts := h.m.StartFailed(types.UID("u"), "app", starts[0].InstanceID, ObjectsPending, `secret "db" not yet received from the hub`, h.now); len(acts) != 0 {
		t.Fatalf("a pending start said something: %v", acts)
	}
	c := h.container("u", "app")
	if c.FailStep != 0 || c.RestartCount != 0 || c.Phase != Waiting {
		t.Fatalf("after a pending start: %+v", c)
	}
	st := h.m.PodView(h.m.Instance("u"), h.now).Status
	if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "ContainerCreating" || w.Message != "" || st.Phase != v1.PodPending {
		t.Fatalf("status %+v", st)
	}
	if got := kinds(h.step(h.now.Add(objectsPendingRecheck-time.Millisecond)), Start); len(got) != 0 {
		t.Fatalf("tried again before the recheck: %v", got)
	}
	if next := h.wake; !next.Equal(h.now.Add(objectsPendingRecheck)) {
		t.Fatalf("next wake %v, want the recheck", next)
	}
	// The objects came: tried again at once.
	h.now = h.now.Add(time.Millisecond)
	h.m.RetryWaiting(h.now, h.now, ObjectsPending)
	starts = kinds(h.step(h.now), Start)
	if len(starts) != 1 || starts[0].Attempt != 2 {
		t.Fatalf("want a second attempt at once, got %v", starts)
	}
	// A real failure after the wait backs off from its first step.
	acts := h.m.StartFailed("u", "app", starts[0].InstanceID, CreateContainerConfigError, `secret "db" not found`, h.now)
	if len(kinds(acts, Record)) == 0 || h.container("u", "app").FailStep != 1 {
		t.Fatalf("the kubelet's failure after the wait: %v, %+v", acts, h.container("u", "app"))
	}
}

// Objects that change while a start runs (it may have read them before)
// have the start, if it fails for a reason RetryWaiting named, tried
// again at once rather than after its backoff or recheck.
func TestRetryWaitingDuringAStart(t *testing.T) {
	for _, reason := range []string{ObjectsPending, FailedMount, CreateContainerConfigError} {
		h := newHarness(t)
		h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
		starts := kinds(h.step(h.now), Start)
		h.m.RetryWaiting(h.now, h.now, FailedMount, CreateContainerConfigError, ObjectsPending)
		h.m.StartFailed("u", "app", starts[0].InstanceID, reason, "x", h.now)
		if c := h.container("u", "app"); !c.NotBefore.Equal(h.now) {
			t.Fatalf("%s: not before %v, want now", reason, c.NotBefore)
		}
		if got := kinds(h.step(h.now), Start); len(got) != 1 {
			t.Fatalf("%s: no start at once: %v", reason, got)
		}
	}
	// Not named, or named for an earlier attempt: the backoff holds.
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	starts := kinds(h.step(h.now), Start)
	h.m.RetryWaiting(h.now, h.now, ErrImagePull)
	h.m.StartFailed("u", "app", starts[0].InstanceID, ObjectsPending, "x", h.now)
	if c := h.container("u", "app"); !c.NotBefore.Equal(h.now.Add(objectsPendingRecheck)) {
		t.Fatalf("not before %v, want the recheck", c.NotBefore)
	}
}

// A change the daemon takes after a start was asked for does not retry
// that start's failure at once (the start saw it), and an image's arrival
// never retries a start in flight (the runtime may have held the pull
// until the import ended): a pull failing twice in a row would double
// its backoff.
func TestRetryWaitingAfterTheStartBegan(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		late   bool
	}{{"objects changed before the start", CreateContainerConfigError, true}, {"an image arrived during the pull", ErrImagePull, false}} {
		h := newHarness(t)
		h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
		changed := h.now
		if tc.late {
			h.now = h.now.Add(100 * time.Millisecond)
		}
		starts := kinds(h.step(h.now), Start)
		h.m.RetryWaiting(changed, h.now, tc.reason)
		h.m.StartFailed("u", "app", starts[0].InstanceID, tc.reason, "x", h.now)
		if c := h.container("u", "app"); !c.NotBefore.After(h.now) {
			t.Fatalf("%s: not before %v: retried at once, want the backoff", tc.name, c.NotBefore)
		}
	}
}
