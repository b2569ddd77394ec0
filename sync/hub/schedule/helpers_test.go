package schedule

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// t0 is the fake clock's start; tests never sleep.
var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

// kv turns "k=v" strings into a map.
func kv(pairs ...string) map[string]string {
	m := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		m[k] = v
	}
	return m
}

// device is a ready device with 4 CPUs, 4 GiB and the given labels.
func device(name string, labels ...string) Device {
	return Device{Name: name, Labels: kv(labels...), Allocatable: v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("4Gi"),
		v1.ResourcePods: resource.MustParse("110")}}
}

// pod is a pod in default with one container requesting cpu and memory
// ("" for none); node "" leaves it pending.
func pod(name, node string, labels map[string]string, cpu, mem string) *v1.Pod {
	req := v1.ResourceList{}
	if cpu != "" {
		req[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		req[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: labels, CreationTimestamp: metav1.NewTime(t0)},
		Spec: v1.PodSpec{NodeName: node, Containers: []v1.Container{{Name: "c", Image: "host",
			Resources: v1.ResourceRequirements{Requests: req}}}},
	}
}

func withPriority(p *v1.Pod, prio int32) *v1.Pod {
	p.Spec.Priority = &prio
	return p
}

func ref(name string) types.NamespacedName {
	return types.NamespacedName{Namespace: "default", Name: name}
}

// bindingOf returns the device a pod was bound to in the plan, or "".
func bindingOf(plan Plan, name string) string {
	for _, b := range plan.Bindings {
		if b.Pod == ref(name) {
			return b.Device
		}
	}
	return ""
}

func pendingOf(plan Plan, name string) (Pending, bool) {
	for _, p := range plan.Pending {
		if p.Pod == ref(name) {
			return p, true
		}
	}
	return Pending{}, false
}

func deletionOf(plan Plan, name string) (Deletion, bool) {
	for _, d := range plan.Deletions {
		if d.Pod == ref(name) {
			return d, true
		}
	}
	return Deletion{}, false
}

// mustBind fails unless the pod was bound to one of the devices.
func mustBind(t *testing.T, plan Plan, name string, devices ...string) string {
	t.Helper()
	got := bindingOf(plan, name)
	for _, d := range devices {
		if got == d {
			return got
		}
	}
	p, _ := pendingOf(plan, name)
	t.Fatalf("pod %s bound to %q, want one of %v (pending: %q)", name, got, devices, p.Message)
	return ""
}

func mustPend(t *testing.T, plan Plan, name string) Pending {
	t.Helper()
	p, ok := pendingOf(plan, name)
	if !ok {
		t.Fatalf("pod %s is not pending; bound to %q", name, bindingOf(plan, name))
	}
	return p
}

func int32p(v int32) *int32 { return &v }

func deployment(name string, replicas int32, labels map[string]string, cpu, mem string) *appsv1.Deployment {
	tmpl := pod("", "", labels, cpu, mem)
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: appsv1.DeploymentSpec{Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec}},
	}
}

func daemonSet(name string, labels map[string]string, cpu, mem string) *appsv1.DaemonSet {
	tmpl := pod("", "", labels, cpu, mem)
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: tmpl.Spec}},
	}
}

// apply feeds a plan back as the next pass's input, as the hub would:
// created pods stored, bindings set, deletions marked terminating,
// preemptors nominated.
func apply(in Input, plan Plan, now time.Time) Input {
	out := in
	out.Now = now
	byKey := map[types.NamespacedName]*v1.Pod{}
	var pods []*v1.Pod
	for _, p := range in.Pods {
		c := p.DeepCopy()
		byKey[keyOf(c)] = c
		pods = append(pods, c)
	}
	for _, p := range plan.Create {
		c := p.DeepCopy()
		byKey[keyOf(c)] = c
		pods = append(pods, c)
	}
	for _, b := range plan.Bindings {
		byKey[b.Pod].Spec.NodeName = b.Device
		byKey[b.Pod].Status.NominatedNodeName = ""
	}
	for _, p := range plan.Pending {
		if p.NominatedNodeName != "" {
			byKey[p.Pod].Status.NominatedNodeName = p.NominatedNodeName
		}
	}
	for _, d := range plan.Deletions {
		ts := metav1.NewTime(now)
		byKey[d.Pod].DeletionTimestamp = &ts
	}
	out.Pods = pods
	return out
}

// removeTerminating drops the pods that finished terminating, as the hub
// does once their device confirms.
func removeTerminating(in Input, onDevices ...string) Input {
	var keep []*v1.Pod
	for _, p := range in.Pods {
		gone := p.DeletionTimestamp != nil
		if gone && len(onDevices) > 0 {
			gone = false
			for _, d := range onDevices {
				gone = gone || p.Spec.NodeName == d || p.Spec.NodeName == ""
			}
		}
		if !gone {
			keep = append(keep, p)
		}
	}
	in.Pods = keep
	return in
}

func podsOn(in Input, device string) []string {
	var out []string
	for _, p := range in.Pods {
		if p.Spec.NodeName == device && p.DeletionTimestamp == nil {
			out = append(out, p.Name)
		}
	}
	return out
}

var _ = fmt.Sprint

// PriorityClassesForTest are "low" (10, the global default) and "high" (1000).
func PriorityClassesForTest() []*schedulingv1.PriorityClass {
	return []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: "low"}, Value: 10, GlobalDefault: true},
		{ObjectMeta: metav1.ObjectMeta{Name: "high"}, Value: 1000},
	}
}

func labelsEverything() labels.Selector { return labels.Everything() }
func labelsNothing() labels.Selector    { return labels.Nothing() }
