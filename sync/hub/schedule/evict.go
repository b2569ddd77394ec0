package schedule

import (
	"fmt"
	"slices"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/schedule/fleet"
)

// evictTainted is the taint-based eviction of the node lifecycle
// controller: a pod on a device with NoExecute taints is deleted at once
// if it does not tolerate one, else when the shortest tolerationSeconds of
// the tolerations it uses has passed since the taint was added (300 s for
// unreachable and not-ready, from DefaultTolerationSeconds). DaemonSet
// pods tolerate those two for ever and so never move.
func (s *state) evictTainted() {
	for _, n := range s.nodes {
		var noExec []v1.Taint
		lost := false
		for _, t := range n.node.Spec.Taints {
			if t.Effect == v1.TaintEffectNoExecute {
				noExec = append(noExec, t)
				lost = lost || t.Key == v1.TaintNodeUnreachable
			}
		}
		if len(noExec) == 0 {
			continue
		}
		for _, p := range slices.Clone(n.pods) {
			if p.terminating {
				continue
			}
			due, ok := fleet.EvictionDue(p.pod.Spec.Tolerations, noExec)
			if !ok || s.now.Before(due) {
				continue
			}
			if lost {
				s.markDeleted(p, ReasonNodeLost, fmt.Sprintf("Device %s which was running pod %s is unresponsive", n.name, p.key.Name))
			} else {
				s.markDeleted(p, ReasonTaint, "Taint manager: deleting due to NoExecute taint")
			}
		}
	}
}

// deleteLost deletes the pods bound to devices no longer in the fleet, as
// the pod garbage collector does for pods of deleted nodes.
func (s *state) deleteLost() {
	for _, p := range s.order {
		if name := p.pod.Spec.NodeName; name != "" && p.node == nil && !p.terminating {
			s.markDeleted(p, ReasonNodeLost, fmt.Sprintf("device %s is no longer in the fleet", name))
		}
	}
}
