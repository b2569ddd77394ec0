// Package fleet is the fleet as the scheduler's nodes: a device's state
// as a v1.Node (its labels, the node-lifecycle taints, allocatable) and
// resource lists in the scheduler's integer units, with what a pod
// requests and what a device lacks for it, and the rules of taints and
// tolerations (which taint a pod does not tolerate, when it must leave).
package fleet

import (
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Device is a device as the scheduler sees it: a node.
type Device struct {
	// Name is the device ID; it is the node name and the value of the
	// kubernetes.io/hostname label.
	Name   string
	Labels map[string]string
	// Taints are the operator's (podhub taint); the node-lifecycle taints
	// follow from the fields below (see NodeTaints).
	Taints []v1.Taint
	// Unschedulable is a cordoned device.
	Unschedulable bool
	// Allocatable is what the device reports it can give pods. A missing
	// "pods" entry means the kubelet's default of 110.
	Allocatable v1.ResourceList
	// Conditions are the device's own node conditions (Ready and the
	// pressures).
	Conditions []v1.NodeCondition
	// UnreachableSince is when the hub stopped hearing from the device;
	// zero while it is heard from.
	UnreachableSince time.Time
	// Fenced: the operator declared this device dead (podhub fence device
	// ID). It carries the out-of-service taint (NoExecute), and once it is
	// unreachable its pods are force-deleted at the hub and replaced.
	Fenced bool
}

// defaultMaxPods is the kubelet's default --max-pods.
const defaultMaxPods = 110

// MaxPods is how many pods the device takes: its allocatable "pods", or
// the kubelet's default.
func (d *Device) MaxPods() int64 {
	if q, ok := d.Allocatable[v1.ResourcePods]; ok {
		return q.Value()
	}
	return defaultMaxPods
}

// NodeTaints returns every taint the device carries: the operator's, and the
// ones Kubernetes' node lifecycle controller would set from its state —
// unreachable (NoSchedule and NoExecute, timed from when it went silent),
// not-ready, unschedulable (cordon) and the pressures.
func (d *Device) NodeTaints() []v1.Taint {
	out := append([]v1.Taint(nil), d.Taints...)
	add := func(key string, effect v1.TaintEffect, since time.Time) {
		t := v1.Taint{Key: key, Effect: effect}
		if effect == v1.TaintEffectNoExecute {
			added := metav1.NewTime(since)
			t.TimeAdded = &added
		}
		out = append(out, t)
	}
	switch {
	case !d.UnreachableSince.IsZero():
		add(v1.TaintNodeUnreachable, v1.TaintEffectNoSchedule, d.UnreachableSince)
		add(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute, d.UnreachableSince)
	default:
		if c := d.condition(v1.NodeReady); c != nil && c.Status != v1.ConditionTrue {
			since := c.LastTransitionTime.Time
			key := v1.TaintNodeNotReady
			if c.Status == v1.ConditionUnknown {
				key = v1.TaintNodeUnreachable
			}
			add(key, v1.TaintEffectNoSchedule, since)
			add(key, v1.TaintEffectNoExecute, since)
		}
	}
	if d.Unschedulable {
		add(v1.TaintNodeUnschedulable, v1.TaintEffectNoSchedule, time.Time{})
	}
	if d.Fenced {
		// As an operator taints a node out-of-service after shutting it
		// down: nothing new lands there, and what does not tolerate it leaves.
		out = append(out, v1.Taint{Key: v1.TaintNodeOutOfService, Value: "fenced", Effect: v1.TaintEffectNoExecute})
	}
	for _, p := range []struct {
		cond v1.NodeConditionType
		key  string
	}{
		{v1.NodeMemoryPressure, v1.TaintNodeMemoryPressure},
		{v1.NodeDiskPressure, v1.TaintNodeDiskPressure},
		{v1.NodePIDPressure, v1.TaintNodePIDPressure},
	} {
		if c := d.condition(p.cond); c != nil && c.Status == v1.ConditionTrue {
			add(p.key, v1.TaintEffectNoSchedule, time.Time{})
		}
	}
	return out
}

// Ready says the device's Ready condition is True.
func (d *Device) Ready() bool {
	c := d.condition(v1.NodeReady)
	return c != nil && c.Status == v1.ConditionTrue
}

func (d *Device) condition(t v1.NodeConditionType) *v1.NodeCondition {
	for i := range d.Conditions {
		if d.Conditions[i].Type == t {
			return &d.Conditions[i]
		}
	}
	return nil
}

// Node returns the device as a v1.Node: its labels with the well-known
// kubernetes.io/hostname, its taints, cordon and allocatable.
func (d *Device) Node() *v1.Node {
	labels := make(map[string]string, len(d.Labels)+1)
	for k, v := range d.Labels {
		labels[k] = v
	}
	if _, ok := labels[v1.LabelHostname]; !ok {
		labels[v1.LabelHostname] = d.Name
	}
	return &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: d.Name, Labels: labels},
		Spec:       v1.NodeSpec{Unschedulable: d.Unschedulable, Taints: d.NodeTaints()},
		Status:     v1.NodeStatus{Allocatable: d.Allocatable, Conditions: d.Conditions},
	}
}
