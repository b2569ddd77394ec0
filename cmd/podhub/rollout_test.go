package main

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// rollout status of a StatefulSet says what kubectl's
// StatefulSetStatusViewer says, and fails on the hub's halt.
func TestStatefulSetRolloutStateAsKubectl(t *testing.T) {
	three := int32(3)
	set := func(gen, observed int64, ready, updated, current int32, partition *int32) *appsv1.StatefulSet {
		s := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", Generation: gen},
			Spec: appsv1.StatefulSetSpec{Replicas: &three, UpdateStrategy: appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType}},
			Status: appsv1.StatefulSetStatus{ObservedGeneration: observed, Replicas: 3, ReadyReplicas: ready, UpdatedReplicas: updated,
				CurrentReplicas: current, CurrentRevision: "db-abc", UpdateRevision: "db-abc"}}
		if partition != nil {
			s.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateStatefulSetStrategy{Partition: partition}
		}
		if updated != current {
			s.Status.UpdateRevision = "db-def"
		}
		return s
	}
	zero, two := int32(0), int32(2)
	for _, c := range []struct {
		s    *appsv1.StatefulSet
		want string
		done bool
	}{
		{set(2, 1, 3, 3, 3, &zero), "Waiting for statefulset spec update to be observed...\n", false},
		{set(1, 0, 0, 0, 0, &zero), "Waiting for statefulset spec update to be observed...\n", false},
		{set(2, 2, 2, 1, 2, &zero), "Waiting for 1 pods to be ready...\n", false},
		{set(2, 2, 3, 1, 2, &zero), "Waiting for partitioned roll out to finish: 1 out of 3 new pods have been updated...\n", false},
		{set(2, 2, 3, 3, 3, &zero), "partitioned roll out complete: 3 new pods have been updated...\n", true},
		{set(2, 2, 3, 1, 2, &two), "partitioned roll out complete: 1 new pods have been updated...\n", true},
		{set(2, 2, 3, 1, 2, nil), "waiting for statefulset rolling update to complete 1 pods at revision db-def...\n", false},
		{set(2, 2, 3, 3, 3, nil), "statefulset rolling update complete 3 pods at revision db-abc...\n", true},
	} {
		got, done, err := statefulSetState(c.s)
		if err != nil || got != c.want || done != c.done {
			t.Errorf("%+v: %q %v %v; want %q %v", c.s.Status, got, done, err, c.want, c.done)
		}
	}
	halted := set(2, 2, 3, 1, 2, &zero)
	halted.Status.Conditions = []appsv1.StatefulSetCondition{{Type: workloads.StatefulSetRolloutHalted, Message: `ControllerRevision "db-def" rollout halted`}}
	if _, _, err := statefulSetState(halted); err == nil || !strings.Contains(err.Error(), `statefulset "db": ControllerRevision "db-def" rollout halted`) {
		t.Errorf("halted: %v", err)
	}
	onDelete := set(2, 2, 3, 3, 3, nil)
	onDelete.Spec.UpdateStrategy.Type = appsv1.OnDeleteStatefulSetStrategyType
	if _, done, err := statefulSetState(onDelete); err == nil || !done || err.Error() != "rollout status is only available for RollingUpdate strategy type" {
		t.Errorf("OnDelete: %v %v", done, err)
	}
}
