package controllers

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/schedule"
)

func pod(name, device string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Spec: v1.PodSpec{NodeName: device}}
}

func key(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: "default", Name: name}
}

// A plan changes copies of the pods it is given (they are the cache's),
// marks what it made or changed, and deletes at once only the pods no
// device runs.
func TestApplyPlanChangesCopies(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before := []*v1.Pod{pod("bound", "d1"), pod("waiting", ""), pod("unplaced", ""), pod("stopping", "d2"), pod("kept", "d1")}
	plan := schedule.Plan{
		Create:    []*v1.Pod{pod("new", "")},
		Bindings:  []schedule.Binding{{Pod: key("waiting"), Device: "d2"}, {Pod: key("gone-meanwhile"), Device: "d1"}},
		Pending:   []schedule.Pending{{Pod: key("new"), Message: "0/2 devices are available", NominatedNodeName: "d1"}},
		Deletions: []schedule.Deletion{{Pod: key("unplaced"), Reason: schedule.ReasonScaledDown}, {Pod: key("stopping"), Reason: schedule.ReasonTaint, Message: "tainted"}},
	}
	pods, changed, gone := applyPlan(before, plan, now)
	if before[1].Spec.NodeName != "" || before[3].DeletionTimestamp != nil {
		t.Fatal("the plan changed a pod it was given, not its copy")
	}
	if w := pods[key("waiting")]; w.Spec.NodeName != "d2" || len(w.Status.Conditions) != 1 || w.Status.Conditions[0].Status != v1.ConditionTrue {
		t.Fatalf("bound pod: %+v", w)
	}
	if n := pods[key("new")]; n.Status.Phase != v1.PodPending || n.Status.NominatedNodeName != "d1" ||
		n.Status.Conditions[0].Reason != v1.PodReasonUnschedulable || !n.Status.Conditions[0].LastTransitionTime.Time.Equal(now) {
		t.Fatalf("pending pod: %+v", n.Status)
	}
	if s := pods[key("stopping")]; s.DeletionTimestamp == nil || s.Status.Reason != schedule.ReasonTaint || s.Status.Message != "tainted" {
		t.Fatalf("bound pod deleted: %+v", s)
	}
	if _, ok := pods[key("gone-meanwhile")]; ok {
		t.Fatal("a binding made a pod the hub does not hold")
	}
	if !gone[key("unplaced")] || gone[key("stopping")] || len(gone) != 1 {
		t.Fatalf("gone %v: want the unplaced pod only", gone)
	}
	for _, k := range []string{"waiting", "new", "unplaced", "stopping"} {
		if !changed[key(k)] {
			t.Errorf("%s not marked changed", k)
		}
	}
	if changed[key("bound")] || changed[key("kept")] || pods[key("kept")] != before[4] {
		t.Fatal("a pod the plan leaves was copied or marked changed")
	}
}

// A deletion for a disruption gives the pod DisruptionTarget=True with
// Kubernetes' reason and message; a workload's own deletion does not.
func TestApplyPlanSetsDisruptionTarget(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	before := []*v1.Pod{pod("victim", "d1"), pod("old", "d1"), pod("orphan", "d2")}
	plan := schedule.Plan{Deletions: []schedule.Deletion{
		{Pod: key("victim"), Reason: schedule.ReasonPreempted, Disruption: schedule.ReasonPreempted},
		{Pod: key("old"), Reason: schedule.ReasonOutdated},
		{Pod: key("orphan"), Reason: schedule.ReasonNodeLost, Disruption: schedule.DisruptionPodGC},
	}}
	pods, _, _ := applyPlan(before, plan, now)
	want := map[string][2]string{
		"victim": {"PreemptionByScheduler", "default-scheduler: preempting to accommodate a higher priority pod"},
		"orphan": {"DeletionByPodGC", "PodGC: node no longer exists"},
	}
	for name, p := range pods {
		var got *v1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == v1.DisruptionTarget {
				got = &p.Status.Conditions[i]
			}
		}
		w, disrupted := want[name.Name]
		switch {
		case !disrupted && got != nil:
			t.Errorf("%s: DisruptionTarget %+v on a workload's own deletion", name.Name, got)
		case disrupted && (got == nil || got.Status != v1.ConditionTrue || got.Reason != w[0] || got.Message != w[1] || !got.LastTransitionTime.Time.Equal(now)):
			t.Errorf("%s: DisruptionTarget %+v, want %v", name.Name, got, w)
		}
	}
}
