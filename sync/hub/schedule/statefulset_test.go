package schedule

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func statefulSet(name string, replicas int32, labels map[string]string) *appsv1.StatefulSet {
	tmpl := pod("", "", labels, "100m", "")
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: appsv1.StatefulSetSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Template:            v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec}},
	}
}

// StatefulSet pods are placed as any pod, spread over the devices by
// their set's selector; a fenced device gets none, and its pods leave it
// gracefully while it is heard from (the out-of-service taint) and are
// forgotten at once when it is not — the name is free for the next pass.
func TestStatefulSetPlacementAndFencing(t *testing.T) {
	a, b, c := device("a"), device("b"), device("c")
	c.Fenced = true
	in := Input{Now: t0, Devices: []Device{a, b, c}, StatefulSets: []*appsv1.StatefulSet{statefulSet("db", 2, kv("app=db"))}}
	plan := Schedule(in)
	if len(plan.Create) != 2 || plan.Create[0].Name != "db-0" || plan.Create[1].Name != "db-1" {
		t.Fatalf("created %d pods", len(plan.Create))
	}
	on0, on1 := mustBind(t, plan, "db-0", "a", "b"), mustBind(t, plan, "db-1", "a", "b")
	if on0 == on1 {
		t.Errorf("db-0 and db-1 both on %s: the set's selector spreads them", on0)
	}
	in = apply(in, plan, t0)
	// db-0's device is fenced while it is heard from: a graceful eviction.
	for i := range in.Devices {
		if in.Devices[i].Name == on0 {
			in.Devices[i].Fenced = true
		}
	}
	plan = Schedule(in)
	if d, ok := deletionOf(plan, "db-0"); !ok || d.Force || d.Reason != ReasonTaint {
		t.Fatalf("db-0 on a fenced, reachable device: %+v, want a graceful taint eviction", d)
	}
	if len(plan.Create) != 0 {
		t.Fatal("db-0 made again while its device may still run it")
	}
	in = apply(in, plan, t0)
	// Then the device goes silent: db-0 is forgotten, and made again on
	// the one device left in the next pass.
	for i := range in.Devices {
		if in.Devices[i].Name == on0 {
			in.Devices[i].UnreachableSince = t0
		}
	}
	in.Now = t0.Add(time.Second)
	plan = Schedule(in)
	if d, ok := deletionOf(plan, "db-0"); !ok || !d.Force || d.Reason != ReasonPodGC {
		t.Fatalf("db-0 on a fenced, silent device: %+v, want a force deletion", d)
	}
	if len(plan.Create) != 0 {
		t.Fatal("db-0 made in the pass that forgot it")
	}
	var keep []*v1.Pod
	for _, p := range in.Pods {
		if p.Name != "db-0" {
			keep = append(keep, p)
		}
	}
	in.Pods = keep
	plan = Schedule(in)
	if len(plan.Create) != 1 || plan.Create[0].Name != "db-0" {
		t.Fatalf("created %v, want db-0 again", plan.Create)
	}
	mustBind(t, plan, "db-0", on1)
}
