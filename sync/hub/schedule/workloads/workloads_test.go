package workloads

import (
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// books is a Cluster in memory: it holds what it is given and records
// what the controllers ask of it.
type books struct {
	owners  *Owners
	nodes   []Node
	pods    []Pod
	deleted map[string]string
	events  []Event
}

func (b *books) Nodes() []Node { return b.nodes }
func (b *books) Pods() []Pod   { return b.pods }
func (b *books) Owned(index string) []Pod {
	var out []Pod
	for _, p := range b.pods {
		if b.owners.Key(p.Pod) == index {
			out = append(out, p)
		}
	}
	return out
}
func (b *books) Taken(k types.NamespacedName) bool {
	for _, p := range b.pods {
		if p.Key == k {
			return true
		}
	}
	return false
}
func (b *books) Admit(*v1.Pod) error { return nil }
func (b *books) Count() int          { return len(b.pods) }
func (b *books) Add(p *v1.Pod) {
	b.pods = append(b.pods, Pod{Pod: p, Key: types.NamespacedName{Namespace: p.Namespace, Name: p.Name}, Created: t0})
}
func (b *books) Delete(k types.NamespacedName, reason, _ string) {
	b.deleted[k.Name] = reason
	for i := range b.pods {
		if b.pods[i].Key == k {
			b.pods[i].Terminating = true
		}
	}
}
func (b *books) ForceDelete(k types.NamespacedName, reason, _ string) {
	b.deleted[k.Name] = "force " + reason
	for i := range b.pods {
		if b.pods[i].Key == k {
			b.pods[i].Terminating = true
		}
	}
}
func (b *books) Event(e Event) { b.events = append(b.events, e) }

func web(replicas int32) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web", UID: "u1"}}
	d.Spec.Replicas = &replicas
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	d.Spec.Template.Labels = map[string]string{"app": "web"}
	return d
}

// The controllers reach the books only through Cluster: a Deployment's
// replicas are added with its ReplicaSet's labels and owner, and a pod
// whose DaemonSet is gone is deleted.
func TestControllersWorkThroughTheCluster(t *testing.T) {
	d := web(2)
	orphan := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "agent-x",
		OwnerReferences: []metav1.OwnerReference{controllerRef("DaemonSet", "agent", "u2")}}}
	b := &books{owners: NewOwners(nil, []*appsv1.Deployment{d}), deleted: map[string]string{},
		pods: []Pod{{Pod: orphan, Key: types.NamespacedName{Namespace: "default", Name: "agent-x"}}}}
	Sync(b, Pass{Now: t0, Deployments: []*appsv1.Deployment{d}, Owners: b.owners})
	hash := TemplateHash(&d.Spec.Template)
	if len(b.pods) != 3 {
		t.Fatalf("%d pods, want the orphan and 2 replicas", len(b.pods))
	}
	for _, p := range b.pods[1:] {
		ref := ControllerOf(p.Pod)
		if p.Pod.Labels[LabelPodTemplateHash] != hash || ref.Name != "web-"+hash || !strings.HasPrefix(p.Key.Name, "web-"+hash+"-") {
			t.Errorf("replica %s: labels %v, owner %v", p.Key.Name, p.Pod.Labels, ref)
		}
	}
	if b.deleted["agent-x"] != ReasonOwnerDeleted {
		t.Errorf("deleted %v, want agent-x for %s", b.deleted, ReasonOwnerDeleted)
	}
	if len(b.events) != 1 || b.events[0].Reason != "ScalingReplicaSet" {
		t.Errorf("events %+v, want one ScalingReplicaSet", b.events)
	}
}

// Past MaxPods a workload's new pod is refused once per pass, with a
// FailedCreate event, and nothing is added.
func TestCreateStopsAtMaxPods(t *testing.T) {
	d := web(3)
	b := &books{owners: NewOwners(nil, []*appsv1.Deployment{d}), deleted: map[string]string{}}
	Sync(b, Pass{Now: t0, Deployments: []*appsv1.Deployment{d}, Owners: b.owners, MaxPods: 1})
	if len(b.pods) != 1 {
		t.Fatalf("%d pods added, want 1", len(b.pods))
	}
	var failed []Event
	for _, e := range b.events {
		if e.Reason == "FailedCreate" {
			failed = append(failed, e)
		}
	}
	if len(failed) != 1 || !strings.Contains(failed[0].Message, "exceeded quota: podhub") {
		t.Errorf("FailedCreate events %+v, want one quota refusal", failed)
	}
}
