package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// slots admits at most n pods, preempting the lowest-priority one for a
// pod of higher priority.
func slots(n int) AdmitFunc {
	return func(c *v1.Pod, held []*v1.Pod) Admission {
		if len(held) < n {
			return Admission{Admit: true}
		}
		var victim *v1.Pod
		for _, p := range held {
			if PriorityOf(p) < PriorityOf(c) && (victim == nil || PriorityOf(p) < PriorityOf(victim)) {
				victim = p
			}
		}
		if victim == nil {
			return Admission{Reason: "OutOfpods", Message: "Node didn't have enough resource: pods"}
		}
		return Admission{Admit: true, Victims: []types.UID{victim.UID}, Resource: "pods"}
	}
}

func withPriority(p *v1.Pod, prio int32) *v1.Pod {
	p.Spec.Priority = &prio
	return p
}

func TestNotAdmittedPodStaysPendingWithReason(t *testing.T) {
	h := newHarness(t)
	h.m.SetAdmitter(slots(1))
	a, b := pod("a", "ua", v1.RestartPolicyAlways, "c"), pod("b", "ub", v1.RestartPolicyAlways, "c")
	h.m.SetDesired([]*v1.Pod{a, b})
	if got := startedNames(h.reconcile()); len(got) != 1 {
		t.Fatalf("one slot, started %v", got)
	}
	pend := h.m.PendingView()
	if len(pend) != 1 || pend[0].Name != "b" || pend[0].Status.Phase != v1.PodPending || pend[0].Status.Reason != "OutOfpods" {
		t.Fatalf("pending = %+v", pend)
	}
	h.m.SetDesired([]*v1.Pod{b}) // a removed: its slot frees once it is gone
	h.reconcile()
	acts := h.exit("ua", "c", 143)
	if got := startedNames(acts); len(got) != 1 || h.m.Instance("ub") == nil || len(h.m.PendingView()) != 0 {
		t.Fatalf("b must start once a is gone: %v", acts)
	}
}

func TestPreemptionEndsVictimThenAdmits(t *testing.T) {
	h := newHarness(t)
	h.m.SetAdmitter(slots(1))
	low := withPriority(pod("low", "ulow", v1.RestartPolicyAlways, "c"), 0)
	h.m.SetDesired([]*v1.Pod{low})
	h.reconcile()
	high := withPriority(pod("high", "uhigh", v1.RestartPolicyAlways, "c"), 1000)
	h.m.SetDesired([]*v1.Pod{low, high})
	acts := h.reconcile()
	if len(kinds(acts, Signal)) != 1 || !hasRecord(acts, "Preempted") || h.m.Instance("uhigh") != nil {
		t.Fatalf("preempting: stop the victim, start nothing yet: %+v", acts)
	}
	for _, a := range acts {
		if a.Kind == Record && a.Reason == ReasonPreempted && a.Resource != "pods" {
			t.Errorf("the Preempted event's resource is %q, want pods (kubelet_preemptions' signal)", a.Resource)
		}
	}
	if p := h.m.PendingView(); len(p) != 1 || p[0].Status.Reason != "Preempting" {
		t.Fatalf("pending = %+v", p)
	}
	acts = h.exit("ulow", "c", 143)
	if got := startedNames(acts); len(got) != 1 || h.m.Instance("uhigh") == nil {
		t.Fatalf("high must start once low is gone: %+v", acts)
	}
	st := h.status("ulow")
	if st.Phase != v1.PodFailed || st.Reason != "Preempted" || len(startedNames(h.reconcile())) != 0 {
		t.Fatalf("the victim ends Failed/Preempted and does not restart: %+v", st)
	}
}

func TestAdmissionByPriority(t *testing.T) {
	h := newHarness(t)
	h.m.SetAdmitter(slots(1))
	h.m.SetDesired([]*v1.Pod{
		withPriority(pod("a-low", "u1", v1.RestartPolicyAlways, "c"), 1),
		withPriority(pod("z-high", "u2", v1.RestartPolicyAlways, "c"), 100),
	})
	acts := h.reconcile()
	if s := kinds(acts, Start); len(s) != 1 || s[0].Pod != "u2" {
		t.Fatalf("the higher priority pod must be admitted first: %+v", s)
	}
}

func TestEvictEndsThePodWithItsGrace(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("hog", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	acts := h.m.Evict("u", "The node was low on resource: memory.", time.Second, h.now)
	if len(kinds(acts, Signal)) != 1 || !hasRecord(acts, "Evicted") {
		t.Fatalf("evict: %+v", acts)
	}
	if got := h.container("u", "c").Stop.KillAt.Sub(h.now); got != 2*time.Second {
		t.Fatalf("a 1s hard-eviction grace still gives the signal the 2s minimum: %v", got)
	}
	h.exit("u", "c", 143)
	st := h.status("u")
	if st.Phase != v1.PodFailed || st.Reason != "Evicted" || len(startedNames(h.reconcile())) != 0 {
		t.Fatalf("evicted pods end Failed and stay down: %+v", st)
	}
}

// A refusal that depends on the host asks to be decided again after its
// Recheck, and the pod starts at the first decision that admits it.
func TestHostRefusalIsRecheckedAfterItsDelay(t *testing.T) {
	h := newHarness(t)
	ready := false
	h.m.SetAdmitter(func(*v1.Pod, []*v1.Pod) Admission {
		if !ready {
			return Admission{Reason: "MountPathMissing", Message: "missing", Recheck: 10 * time.Second}
		}
		return Admission{Admit: true}
	})
	h.m.SetDesired([]*v1.Pod{pod("a", "ua", v1.RestartPolicyAlways, "c")})
	if got := startedNames(h.reconcile()); len(got) != 0 || !h.wake.Equal(h.now.Add(10*time.Second)) {
		t.Fatalf("refused: want no start and a wake in 10s, got %v, wake %v", got, h.wake)
	}
	if p := h.m.PendingView(); len(p) != 1 || p[0].Status.Reason != "MountPathMissing" || p[0].Status.Message != "missing" {
		t.Fatalf("pending = %+v", p)
	}
	ready = true
	h.now = h.wake
	if got := startedNames(h.reconcile()); len(got) != 1 || len(h.m.PendingView()) != 0 {
		t.Fatalf("admitted at the recheck: started %v", got)
	}
}
