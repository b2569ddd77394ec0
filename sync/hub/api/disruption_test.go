package api

import (
	"testing"

	v1 "k8s.io/api/core/v1"
)

func target(p *v1.Pod) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.DisruptionTarget {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

// A mirror pod shows who disrupted it: its device (as the kubelet), else
// the hub; a device's own condition stays, and an admission refusal is
// no disruption.
func TestMirrorShowsTheDisruptionTarget(t *testing.T) {
	hub := &v1.Pod{Status: v1.PodStatus{Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Status: v1.ConditionTrue, Reason: "EvictionByEvictionAPI"}}}}
	for _, tc := range []struct {
		name   string
		mirror v1.PodStatus
		want   string
	}{
		{"running, evicted at the hub", v1.PodStatus{Phase: v1.PodRunning}, "EvictionByEvictionAPI"},
		{"evicted by the device", v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."}, "TerminationByKubelet"},
		{"device shutdown", v1.PodStatus{Phase: v1.PodFailed, Reason: "Terminated"}, "TerminationByKubelet"},
		{"refused at admission", v1.PodStatus{Phase: v1.PodFailed, Reason: "Evicted", Message: "The node had condition: [MemoryPressure]."}, "EvictionByEvictionAPI"},
		{"the device's own", v1.PodStatus{Phase: v1.PodFailed, Conditions: []v1.PodCondition{{Type: v1.DisruptionTarget, Reason: "Mine"}}}, "Mine"},
	} {
		m := &v1.Pod{Status: tc.mirror}
		withDisruptionTarget(m, hub)
		if c := target(m); c == nil || c.Reason != tc.want {
			t.Errorf("%s: %+v, want %s", tc.name, c, tc.want)
		}
		if c := target(m); tc.want == "TerminationByKubelet" && c.Message != tc.mirror.Message {
			t.Errorf("%s: message %q", tc.name, c.Message)
		}
	}
	m := &v1.Pod{Status: v1.PodStatus{Phase: v1.PodRunning}}
	withDisruptionTarget(m, &v1.Pod{})
	if target(m) != nil {
		t.Error("a pod nobody disrupted got a DisruptionTarget")
	}
}
