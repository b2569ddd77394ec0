package workloads

import (
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
)

// Owners finds the live workload that controls a pod.
type Owners struct {
	// daemonSetUIDs are the live DaemonSets' UIDs by Index.
	daemonSetUIDs map[string]types.UID
	// deploymentOf finds a ReplicaSet pod's Deployment by Index.
	deploymentOf map[string]*appsv1.Deployment
	// statefulSetOf finds a pod's StatefulSet by Index.
	statefulSetOf map[string]*appsv1.StatefulSet
}

// NewOwners indexes the live workloads; of two with one name, the first.
func NewOwners(dss []*appsv1.DaemonSet, ds []*appsv1.Deployment, sts ...*appsv1.StatefulSet) *Owners {
	o := &Owners{
		deploymentOf:  make(map[string]*appsv1.Deployment, len(ds)),
		daemonSetUIDs: make(map[string]types.UID, len(dss)),
		statefulSetOf: make(map[string]*appsv1.StatefulSet, len(sts)),
	}
	for _, s := range sts {
		if k := Index("StatefulSet", s.Namespace, s.Name); o.statefulSetOf[k] == nil {
			o.statefulSetOf[k] = s
		}
	}
	for _, d := range ds {
		if k := Index("Deployment", d.Namespace, d.Name); o.deploymentOf[k] == nil {
			o.deploymentOf[k] = d
		}
	}
	for _, d := range dss {
		if k := Index("DaemonSet", d.Namespace, d.Name); !hasKey(o.daemonSetUIDs, k) {
			o.daemonSetUIDs[k] = d.UID
		}
	}
	return o
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// ControllerOf is the pod's controller owner reference, or nil.
func ControllerOf(p *v1.Pod) *metav1.OwnerReference {
	return metav1.GetControllerOfNoCopy(p)
}

// Index names a workload: the key Cluster.Owned files its pods under.
func Index(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// ownerIndex is the workload a pod's controller reference names: its
// DaemonSet, or the Deployment of its ReplicaSet (named after the
// Deployment and the pod's template hash); "" for none.
func ownerIndex(p *v1.Pod) string {
	ref := ControllerOf(p)
	if ref == nil {
		return ""
	}
	switch ref.Kind {
	case "DaemonSet", "StatefulSet":
		return Index(ref.Kind, p.Namespace, ref.Name)
	case "ReplicaSet":
		if d, ok := strings.CutSuffix(ref.Name, "-"+p.Labels[LabelPodTemplateHash]); ok {
			return Index("Deployment", p.Namespace, d)
		}
	}
	return ""
}

// Key is ownerIndex for a pod of the live workload of that name: a
// pod whose controller reference carries another UID belongs to a
// workload deleted and applied again, which the garbage collector
// deletes (as it does when a new object takes an old one's name) and
// the new workload never adopts. A reference or workload without a UID
// matches by name. "" for a pod of no live workload.
func (o *Owners) Key(p *v1.Pod) string {
	k := ownerIndex(p)
	if k == "" {
		return ""
	}
	ref := ControllerOf(p)
	uid, live := o.daemonSetUIDs[k]
	if d := o.deploymentOf[k]; d != nil {
		uid, live = d.UID, true
	}
	if s := o.statefulSetOf[k]; s != nil {
		uid, live = s.UID, true
	}
	if !live || ref.UID == "" || uid == "" {
		return k
	}
	want := uid
	if ref.Kind == "ReplicaSet" {
		want = replicaSetUID(uid, p.Labels[LabelPodTemplateHash])
	}
	if ref.UID != want {
		return ""
	}
	return k
}

// replicaSetUID is the UID a Deployment's ReplicaSet of one template
// hash carries in its pods' controller references.
func replicaSetUID(deployment types.UID, hash string) types.UID {
	return types.UID(string(deployment) + "-" + hash)
}

// ownedBy reports whether a Deployment controls a pod (through the
// ReplicaSet named after it and the pod's template hash).
func ownedBy(d *appsv1.Deployment, p *v1.Pod) bool {
	ref := ControllerOf(p)
	return ref != nil && ref.Kind == "ReplicaSet" && p.Namespace == d.Namespace &&
		ref.Name == d.Name+"-"+p.Labels[LabelPodTemplateHash]
}

// DefaultSelector is the selector the system default spread uses for a
// pod: its ReplicaSet's (the Deployment's selector and the pod's template
// hash) or its StatefulSet's; nil for pods neither selects (DaemonSet and
// bare pods, as helper.DefaultSelector finds no Service here).
func (o *Owners) DefaultSelector(p *v1.Pod) labels.Selector {
	if s := o.statefulSetOf[o.Key(p)]; s != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
		if err != nil || sel.Empty() {
			return nil
		}
		return sel
	}
	if d := o.deploymentOf[o.Key(p)]; d != nil && ownedBy(d, p) {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() {
			return nil
		}
		if r, err := labels.NewRequirement(LabelPodTemplateHash, selection.Equals, []string{p.Labels[LabelPodTemplateHash]}); err == nil {
			sel = sel.Add(*r)
		}
		return sel
	}
	return nil
}
