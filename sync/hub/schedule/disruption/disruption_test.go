package disruption

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func budget(name string, minAvailable, maxUnavailable *intstr.IntOrString) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Generation: 1},
		Spec: policyv1.PodDisruptionBudgetSpec{MinAvailable: minAvailable, MaxUnavailable: maxUnavailable,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
}

func ptr[T any](v T) *T { return &v }

// webPod is a pod of Deployment web (UID "w", template hash "h"), ready
// on its device or not.
func webPod(name string, ready bool) workloads.Pod {
	yes := true
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default",
		Labels:          map[string]string{"app": "web", workloads.LabelPodTemplateHash: "h"},
		OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-h", UID: "w-h", Controller: &yes}}}}
	return workloads.Pod{Pod: p, Key: types.NamespacedName{Namespace: "default", Name: name}, Node: "d1",
		Observed: workloads.Observed{Reported: true, Phase: v1.PodRunning, Ready: ready}}
}

func webScale(replicas int32) []Scale {
	return []Scale{{Kind: "Deployment", Namespace: "default", Name: "web", UID: "w", Replicas: replicas}}
}

func one(t *testing.T, in Input) (*policyv1.PodDisruptionBudget, []workloads.Event) {
	t.Helper()
	res := Sync(in)
	if len(res.PDBs) != 1 {
		t.Fatalf("%d budgets", len(res.PDBs))
	}
	return res.PDBs[0], res.Events
}

func condition(pdb *policyv1.PodDisruptionBudget) metav1.Condition {
	for _, c := range pdb.Status.Conditions {
		if c.Type == policyv1.DisruptionAllowedCondition {
			return c
		}
	}
	return metav1.Condition{}
}

// Percentages round up, minAvailable and maxUnavailable alike
// (GetScaledValueFromIntOrPercent(..., true)), against the Deployment's
// replicas rather than the pods that exist.
func TestPercentagesRoundUpAgainstTheScale(t *testing.T) {
	pods := []workloads.Pod{webPod("a", true), webPod("b", true), webPod("c", true)}
	for _, tc := range []struct {
		name                       string
		min, max                   *intstr.IntOrString
		replicas                   int32
		expected, desired, allowed int32
	}{
		{"minAvailable 50% of 3", ptr(intstr.FromString("50%")), nil, 3, 3, 2, 1},
		{"maxUnavailable 50% of 3", nil, ptr(intstr.FromString("50%")), 3, 3, 1, 2},
		{"maxUnavailable 10% of 3", nil, ptr(intstr.FromString("10%")), 3, 3, 2, 1},
		{"minAvailable 34% of 4 replicas, 3 pods", ptr(intstr.FromString("34%")), nil, 4, 4, 2, 1},
		{"minAvailable 2", ptr(intstr.FromInt32(2)), nil, 5, 3, 2, 1},
		{"maxUnavailable 0", nil, ptr(intstr.FromInt32(0)), 3, 3, 3, 0},
	} {
		pdb, _ := one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{budget("b", tc.min, tc.max)}, Pods: pods, Scales: webScale(tc.replicas)})
		st := pdb.Status
		if st.ExpectedPods != tc.expected || st.DesiredHealthy != tc.desired || st.CurrentHealthy != 3 || st.DisruptionsAllowed != tc.allowed || st.ObservedGeneration != 1 {
			t.Errorf("%s: status %+v", tc.name, st)
		}
		want := policyv1.SufficientPodsReason
		if tc.allowed == 0 {
			want = policyv1.InsufficientPodsReason
		}
		if c := condition(pdb); c.Reason != want || c.LastTransitionTime.Time != t0 {
			t.Errorf("%s: condition %+v", tc.name, c)
		}
	}
}

// Pods the device does not report Ready, terminating pods and pods the
// eviction API let go are not healthy.
func TestOnlyReadyPodsAreHealthy(t *testing.T) {
	pods := []workloads.Pod{webPod("a", true), webPod("b", false), webPod("c", true), webPod("d", true)}
	pods[2].Terminating = true
	pdb := budget("b", ptr(intstr.FromInt32(1)), nil)
	pdb.Status.DisruptedPods = map[string]metav1.Time{"d": metav1.NewTime(t0.Add(-time.Minute)), "gone": metav1.NewTime(t0)}
	got, _ := one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{pdb}, Pods: pods, Scales: webScale(4)})
	if got.Status.CurrentHealthy != 1 || got.Status.DisruptionsAllowed != 0 || len(got.Status.DisruptedPods) != 1 {
		t.Fatalf("status %+v", got.Status)
	}
	if c := condition(got); c.Status != metav1.ConditionFalse || c.Reason != policyv1.InsufficientPodsReason {
		t.Fatalf("condition %+v", c)
	}
	// Past DeletionTimeout a pod still not terminating counts again.
	pdb.Status = got.Status
	later, _ := one(t, Input{Now: t0.Add(90 * time.Second), PDBs: []*policyv1.PodDisruptionBudget{pdb}, Pods: pods, Scales: webScale(4)})
	if later.Status.CurrentHealthy != 2 || later.Status.DisruptionsAllowed != 1 || later.Status.DisruptedPods != nil {
		t.Fatalf("after the timeout: %+v", later.Status)
	}
	if c := condition(later); c.Reason != policyv1.SufficientPodsReason || c.LastTransitionTime.Time != t0.Add(90*time.Second) {
		t.Fatalf("condition %+v", c)
	}
}

func TestSelectorMatchingNothing(t *testing.T) {
	pdb := budget("b", ptr(intstr.FromInt32(1)), nil)
	pdb.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "nothing"}}
	got, events := one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{pdb}, Pods: []workloads.Pod{webPod("a", true)}, Scales: webScale(1)})
	if st := got.Status; st.ExpectedPods != 0 || st.CurrentHealthy != 0 || st.DesiredHealthy != 1 || st.DisruptionsAllowed != 0 {
		t.Fatalf("status %+v", st)
	}
	if len(events) != 1 || events[0].Reason != "NoPods" || events[0].Message != "No matching pods found" || events[0].Kind != Kind {
		t.Fatalf("events %+v", events)
	}
}

// A percentage needs a scale: a DaemonSet's pods have none, and the
// controller fails safe (SyncFailed, no disruption); bare pods are left
// out with a warning, an integer minAvailable counts them.
func TestPercentagesWithoutAScale(t *testing.T) {
	yes := true
	ds := webPod("ds-a", true)
	ds.Pod.OwnerReferences = []metav1.OwnerReference{{Kind: "DaemonSet", Name: "agent", UID: "a", Controller: &yes}}
	pdb := budget("b", nil, ptr(intstr.FromString("50%")))
	pdb.Status.DisruptionsAllowed = 3
	got, events := one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{pdb}, Pods: []workloads.Pod{ds}})
	c := condition(got)
	if got.Status.DisruptionsAllowed != 0 || c.Reason != policyv1.SyncFailedReason || c.Message != `found no controllers for pod "ds-a"` || got.Status.ObservedGeneration != 0 {
		t.Fatalf("status %+v", got.Status)
	}
	if len(events) != 1 || events[0].Reason != "CalculateExpectedPodCountFailed" {
		t.Fatalf("events %+v", events)
	}

	bare := webPod("solo", true)
	bare.Pod.OwnerReferences = nil
	got, events = one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{budget("b", ptr(intstr.FromString("50%")), nil)}, Pods: []workloads.Pod{bare}})
	if got.Status.ExpectedPods != 0 || got.Status.DisruptionsAllowed != 0 || len(events) != 1 || events[0].Reason != "UnmanagedPods" {
		t.Fatalf("bare pods: %+v %+v", got.Status, events)
	}
	got, _ = one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{budget("b", ptr(intstr.FromInt32(0)), nil)}, Pods: []workloads.Pod{bare, ds}})
	if got.Status.ExpectedPods != 2 || got.Status.DisruptionsAllowed != 2 {
		t.Fatalf("integer minAvailable: %+v", got.Status)
	}
}

// A pod whose controller reference carries another Deployment's UID (a
// workload deleted and applied again) has no scale.
func TestScaleNeedsTheLiveDeployment(t *testing.T) {
	p := webPod("a", true)
	p.Pod.OwnerReferences[0].UID = "old-h"
	got, _ := one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{budget("b", nil, ptr(intstr.FromInt32(1)))}, Pods: []workloads.Pod{p}, Scales: webScale(1)})
	if condition(got).Reason != policyv1.SyncFailedReason {
		t.Fatalf("status %+v", got.Status)
	}
}

func refusal(t *testing.T, err error) *Refusal {
	t.Helper()
	var r *Refusal
	if !errors.As(err, &r) {
		t.Fatalf("want a refusal, got %v", err)
	}
	return r
}

func TestEvictionRules(t *testing.T) {
	pods := []workloads.Pod{webPod("a", true), webPod("b", true), webPod("c", false)}
	status := func(pdb *policyv1.PodDisruptionBudget) *policyv1.PodDisruptionBudget {
		got, _ := one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{pdb}, Pods: pods, Scales: webScale(3)})
		return got
	}
	pdb := status(budget("web", ptr(intstr.FromInt32(2)), nil)) // 2 healthy, 2 desired: none allowed
	_, err := Check(pods[0].Pod, true, false, []*policyv1.PodDisruptionBudget{pdb})
	r := refusal(t, err)
	if r.Code != http.StatusTooManyRequests || r.Message != MessageViolates || r.Cause != "The disruption budget web needs 2 healthy pods and has 2 currently" || r.Budget != "web" {
		t.Fatalf("refusal %+v", r)
	}
	// IfHealthyBudget: an unready pod goes only while the budget is met.
	if got, err := Check(pods[2].Pod, false, false, []*policyv1.PodDisruptionBudget{pdb}); err != nil || got != nil {
		t.Fatalf("unready pod, budget met: %v %v", got, err)
	}
	short := status(budget("web", ptr(intstr.FromInt32(3)), nil))
	if _, err := Check(pods[2].Pod, false, false, []*policyv1.PodDisruptionBudget{short}); refusal(t, err).Code != http.StatusTooManyRequests {
		t.Fatal("unready pod, budget not met: allowed")
	}
	short.Spec.UnhealthyPodEvictionPolicy = ptr(policyv1.AlwaysAllow)
	if got, err := Check(pods[2].Pod, false, false, []*policyv1.PodDisruptionBudget{short}); err != nil || got != nil {
		t.Fatalf("AlwaysAllow: %v %v", got, err)
	}
	// Terminal, pending or terminating pods ignore the budget.
	if got, err := Check(pods[0].Pod, true, true, []*policyv1.PodDisruptionBudget{pdb}); err != nil || got != nil {
		t.Fatalf("ignorable: %v %v", got, err)
	}
	// A budget that allows one is charged, then refuses the next.
	loose := status(budget("web", ptr(intstr.FromInt32(1)), nil))
	got, err := Check(pods[0].Pod, true, false, []*policyv1.PodDisruptionBudget{loose})
	if err != nil || got != loose {
		t.Fatalf("first eviction: %v %v", got, err)
	}
	Charge(got, "a", true, t0)
	if loose.Status.DisruptionsAllowed != 0 || condition(loose).Reason != policyv1.InsufficientPodsReason || loose.Status.DisruptedPods["a"].Time != t0 {
		t.Fatalf("charged: %+v", loose.Status)
	}
	if _, err := Check(pods[1].Pod, true, false, []*policyv1.PodDisruptionBudget{loose}); refusal(t, err).Code != http.StatusTooManyRequests {
		t.Fatal("second eviction allowed")
	}
	// Two budgets: the eviction subresource refuses; a budget not yet
	// synced since its spec changed is still being processed.
	if _, err := Check(pods[0].Pod, true, false, []*policyv1.PodDisruptionBudget{pdb, loose}); refusal(t, err).Code != http.StatusInternalServerError {
		t.Fatal("two budgets")
	}
	stale := status(budget("web", ptr(intstr.FromInt32(0)), nil))
	stale.Generation = 2
	if r := refusal(t, func() error {
		_, err := Check(pods[0].Pod, true, false, []*policyv1.PodDisruptionBudget{stale})
		return err
	}()); !strings.Contains(r.Cause, "still being processed") {
		t.Fatalf("stale: %+v", r)
	}
}

func TestBudgetsSpendOncePerDisruption(t *testing.T) {
	pods := []workloads.Pod{webPod("a", true), webPod("b", true), webPod("c", true)}
	got, _ := one(t, Input{Now: t0, PDBs: []*policyv1.PodDisruptionBudget{budget("web", nil, ptr(intstr.FromInt32(1)))}, Pods: pods, Scales: webScale(3)})
	b := NewBudgets([]*policyv1.PodDisruptionBudget{got}, t0)
	if !b.Disrupt(pods[0]) || b.Disrupt(pods[1]) {
		t.Fatal("maxUnavailable 1 let through other than one pod")
	}
	unplaced := webPod("new", false)
	unplaced.Node = ""
	if !b.Disrupt(unplaced) {
		t.Fatal("an unplaced pod is held back")
	}
	if got.Status.DisruptionsAllowed != 0 || got.Status.DisruptedPods != nil {
		t.Fatalf("status %+v", got.Status)
	}
}
