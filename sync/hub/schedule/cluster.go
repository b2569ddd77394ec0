package schedule

import (
	"time"

	v1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
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
type cluster struct {
	s *state
	// nodes are read once: a pass never changes its devices.
	nodes []workloads.Node
}

var _ workloads.Cluster = (*cluster)(nil)

func (c *cluster) Nodes() []workloads.Node {
	if c.nodes == nil {
		c.nodes = make([]workloads.Node, len(c.s.nodes))
		for i, n := range c.s.nodes {
			c.nodes[i] = workloads.Node{Name: n.name, Node: n.node, UnreachableSince: n.unreachableSince, Fenced: n.fenced}
		}
	}
	return c.nodes
}

// view is a pod as the controllers read it now: what its device reports
// of it counts only while it is bound there, and a pod on a device not
// Ready is not ready (the node lifecycle controller's MarkPodsNotReady).
func (s *state) view(p *podInfo) workloads.Pod {
	w := workloads.Pod{Pod: p.pod, Key: p.key, Created: p.created, Terminating: p.terminating}
	if p.node != nil {
		w.Node = p.node.name
		w.Observed = s.observed[p.key]
		if s.notReady[w.Node] {
			w.Observed.Ready, w.Observed.ReadySince = false, time.Time{}
		}
	}
	return w
}

func (s *state) views(ps []*podInfo) []workloads.Pod {
	out := make([]workloads.Pod, len(ps))
	for i, p := range ps {
		out[i] = s.view(p)
	}
	return out
}

func (c *cluster) Pods() []workloads.Pod { return c.s.views(c.s.order) }

func (c *cluster) Owned(index string) []workloads.Pod { return c.s.views(c.s.owned[index]) }

func (c *cluster) Taken(key types.NamespacedName) bool {
	_, taken := c.s.pods[key]
	return taken
}

func (c *cluster) Admit(p *v1.Pod) error { return c.s.admission.Admit(p) }

func (c *cluster) Count() int { return len(c.s.pods) }

func (c *cluster) Add(p *v1.Pod) { c.s.addCreated(p) }

func (c *cluster) Delete(key types.NamespacedName, reason, message string) {
	c.s.markDeleted(c.s.pods[key], reason, message)
}

func (c *cluster) ForceDelete(key types.NamespacedName, reason, message string) {
	if p := c.s.pods[key]; p != nil {
		c.s.forceDelete(p, reason, message)
	}
}

func (c *cluster) Event(e workloads.Event) { c.s.plan.Events = append(c.s.plan.Events, e) }
