package schedule

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/schedule/admission"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// Labels the workload controllers put on their pods.
const (
	LabelPodTemplateHash    = workloads.LabelPodTemplateHash
	LabelControllerHash     = workloads.LabelControllerHash
	LabelTemplateGeneration = workloads.LabelTemplateGeneration
)

// TemplateHash is a pod template's hash as a label value, the name part
// a Deployment's ReplicaSet and pods carry.
func TemplateHash(t *v1.PodTemplateSpec) string { return workloads.TemplateHash(t) }

// ClassPriority is the priority and preemption policy the Priority
// admission plugin gives a pod of class (admission.ClassPriority).
func ClassPriority(class *schedulingv1.PriorityClass) (int32, v1.PreemptionPolicy) {
	return admission.ClassPriority(class)
}

// index files a pod under its workload.
func (s *state) index(p *podInfo) {
	if k := s.owners.Key(p.pod); k != "" {
		s.owned[k] = append(s.owned[k], p)
	}
}

// cluster is the pass's books as the workload controllers see them.
type cluster struct{ s *state }

var _ workloads.Cluster = cluster{}

func (c cluster) Nodes() []workloads.Node {
	out := make([]workloads.Node, len(c.s.nodes))
	for i, n := range c.s.nodes {
		out[i] = workloads.Node{Name: n.name, Node: n.node}
	}
	return out
}

// view is a pod as the controllers read it now.
func view(p *podInfo) workloads.Pod {
	w := workloads.Pod{Pod: p.pod, Key: p.key, Created: p.created, Terminating: p.terminating}
	if p.node != nil {
		w.Node = p.node.name
	}
	return w
}

func views(ps []*podInfo) []workloads.Pod {
	out := make([]workloads.Pod, len(ps))
	for i, p := range ps {
		out[i] = view(p)
	}
	return out
}

func (c cluster) Pods() []workloads.Pod { return views(c.s.order) }

func (c cluster) Owned(index string) []workloads.Pod { return views(c.s.owned[index]) }

func (c cluster) Taken(key types.NamespacedName) bool {
	_, taken := c.s.pods[key]
	return taken
}

func (c cluster) Create(p *v1.Pod, kind string, owner metav1.ObjectMeta) {
	c.s.admitCreated(p, kind, owner)
}

func (c cluster) Delete(key types.NamespacedName, reason, message string) {
	c.s.markDeleted(c.s.pods[key], reason, message)
}

func (c cluster) Event(e workloads.Event) { c.s.plan.Events = append(c.s.plan.Events, e) }

// admitCreated admits a controller's new pod and queues it, or records
// the API server's refusal as a FailedCreate event on the workload.
func (s *state) admitCreated(p *v1.Pod, kind string, owner metav1.ObjectMeta) {
	key := types.NamespacedName{Namespace: owner.Namespace, Name: kind + "/" + owner.Name}
	if s.overQuota[key] {
		return // refused once this pass: one event says so
	}
	err := s.admission.Admit(p)
	if err == nil && s.maxPods > 0 && len(s.pods) >= s.maxPods {
		s.overQuota[key] = true
		err = fmt.Errorf("pods %q is forbidden: exceeded quota: podhub, requested: pods=1, used: pods=%d, limited: pods=%d",
			p.Name, len(s.pods), s.maxPods)
	}
	if err != nil {
		s.plan.Events = append(s.plan.Events, Event{Kind: kind, Namespace: owner.Namespace, Name: owner.Name,
			Type: v1.EventTypeWarning, Reason: "FailedCreate", Message: "Error creating: " + err.Error()})
		return
	}
	s.addCreated(p)
}
