package schedule

import (
	"fmt"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/podvisor/podvisor/sync/hub/schedule/fleet"
	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// quiet is the logger the toleration helpers want; they log nothing we use.
var quiet = logr.Discard()

// The scheduler's filter reasons, word for word.
const (
	reasonUnschedulable   = "node(s) were unschedulable"
	reasonAffinity        = "node(s) didn't match Pod's node affinity/selector"
	reasonSpread          = "node(s) didn't match pod topology spread constraints"
	reasonSpreadLabel     = reasonSpread + " (missing required label)"
	reasonPrefilterFormat = "node(s) didn't satisfy plugin(s) [%s]"
)

type code int

const (
	fits code = iota
	// unschedulable can change by preempting pods (resources, skew).
	unschedulable
	// unresolvable cannot (taints, affinity, cordon, missing label).
	unresolvable
)

// status is one device's filter result for one pod.
type status struct {
	code    code
	reasons []string
}

// cycle is one pod's scheduling attempt, with what its filters share.
type cycle struct {
	s        *state
	p        *podInfo
	affinity nodeaffinity.RequiredNodeAffinity
	// pinned are the only devices to consider, from a required
	// matchFields metadata.name term (NodeAffinity's PreFilter); nil: all.
	pinned []string
	spread *spreadFilter
}

func (s *state) newCycle(p *podInfo) *cycle {
	c := &cycle{s: s, p: p, affinity: nodeaffinity.GetRequiredNodeAffinity(p.pod), pinned: workloads.PinnedNodes(p.pod)}
	c.spread = s.newSpreadFilter(c)
	return c
}

// candidates are the devices the filters run on, in name order.
func (c *cycle) candidates() []*nodeInfo {
	if c.pinned == nil {
		return c.s.nodes
	}
	var out []*nodeInfo
	seen := map[string]bool{}
	for _, name := range c.pinned {
		if n := c.s.byName[name]; n != nil && !seen[name] {
			seen[name] = true
			out = append(out, n)
		}
	}
	sortNodes(out)
	return out
}

// filter runs the scheduler's filter plugins in their order and stops at
// the first that fails: NodeUnschedulable, TaintToleration, NodeAffinity,
// NodeResourcesFit, PodTopologySpread.
func (c *cycle) filter(n *nodeInfo) status {
	pod := c.p.pod
	if n.node.Spec.Unschedulable && !corev1helpers.TolerationsTolerateTaint(quiet, pod.Spec.Tolerations,
		&v1.Taint{Key: v1.TaintNodeUnschedulable, Effect: v1.TaintEffectNoSchedule}, false) {
		return status{unresolvable, []string{reasonUnschedulable}}
	}
	if t, bad := fleet.UntoleratedTaint(n.node.Spec.Taints, pod.Spec.Tolerations); bad {
		return status{unresolvable, []string{fmt.Sprintf("node(s) had untolerated taint {%s: %s}", t.Key, t.Value)}}
	}
	if ok, _ := c.affinity.Match(n.node); !ok {
		return status{unresolvable, []string{reasonAffinity}}
	}
	if r := c.insufficient(n); len(r) > 0 {
		return status{unschedulable, r}
	}
	if c.spread != nil {
		return c.spread.filter(n)
	}
	return status{}
}

// insufficient is NodeResourcesFit: the pod's requests against the
// device's allocatable minus the pods on it and the pods nominated to it
// with at least this pod's priority.
func (c *cycle) insufficient(n *nodeInfo) []string {
	used, count := n.used, len(n.pods)
	if nom := c.s.nominated[n.name]; len(nom) > 0 {
		used = used.Clone()
		for _, q := range nom {
			if q != c.p && q.priority >= c.p.priority {
				used.Add(q.req, 1)
				count++
			}
		}
	}
	return fleet.Insufficient(c.p.req, n.alloc, n.maxPods, used, count)
}

// matchesInclusion is a spread constraint's node inclusion policies:
// nodeAffinityPolicy Honor counts only devices the pod's nodeSelector and
// required affinity match; nodeTaintsPolicy Honor only devices whose
// NoSchedule/NoExecute taints it tolerates.
func (c *cycle) matchesInclusion(n *nodeInfo, k *constraint) bool {
	if k.affinityPolicy == v1.NodeInclusionPolicyHonor {
		if ok, _ := c.affinity.Match(n.node); !ok {
			return false
		}
	}
	if k.taintsPolicy == v1.NodeInclusionPolicyHonor {
		if _, bad := fleet.UntoleratedTaint(n.node.Spec.Taints, c.p.pod.Spec.Tolerations); bad {
			return false
		}
	}
	return true
}
