package workloads

import (
	"fmt"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/schedule/fleet"
)

// evictTainted is the taint-based eviction of the node lifecycle
// controller: a pod on a device with NoExecute taints is deleted at once
// if it does not tolerate one, else when the shortest tolerationSeconds of
// the tolerations it uses has passed since the taint was added (300 s for
// unreachable and not-ready, from DefaultTolerationSeconds). DaemonSet
// pods tolerate those two for ever and so never move.
//
// A deleted pod on a device cut off may still run there. A Deployment
// replaces it at once under a new name, so it may run twice during a
// partition; a StatefulSet's pod keeps its name until the hub knows it
// stopped (forceDeleteUnreachable, or its device's confirmation), so it
// never does.
func (k *controllers) evictTainted() {
	type tainted struct {
		n      Node
		noExec []v1.Taint
		lost   bool
		pods   []Pod
	}
	var nodes []*tainted
	byName := map[string]*tainted{}
	for _, n := range k.c.Nodes() {
		var t *tainted
		for _, taint := range n.Node.Spec.Taints {
			if taint.Effect != v1.TaintEffectNoExecute {
				continue
			}
			if t == nil {
				t = &tainted{n: n}
				nodes = append(nodes, t)
				byName[n.Name] = t
			}
			t.noExec = append(t.noExec, taint)
			t.lost = t.lost || taint.Key == v1.TaintNodeUnreachable
		}
	}
	if len(nodes) == 0 {
		return
	}
	for _, p := range k.c.Pods() {
		if t := byName[p.Node]; t != nil && p.Node != "" {
			t.pods = append(t.pods, p)
		}
	}
	for _, t := range nodes {
		for _, p := range t.pods {
			if p.Terminating {
				continue
			}
			due, ok := fleet.EvictionDue(p.Pod.Spec.Tolerations, t.noExec)
			if !ok || k.now.Before(due) {
				continue
			}
			if t.lost {
				k.c.Delete(p.Key, ReasonNodeLost, fmt.Sprintf("Device %s which was running pod %s is unresponsive", t.n.Name, p.Key.Name))
			} else {
				k.c.Delete(p.Key, ReasonTaint, "Taint manager: deleting due to NoExecute taint")
			}
		}
	}
}

// deleteLost deletes the pods bound to devices no longer in the fleet, as
// the pod garbage collector does for pods of deleted nodes.
func (k *controllers) deleteLost() {
	for _, p := range k.c.Pods() {
		if name := p.Pod.Spec.NodeName; name != "" && p.Node == "" && !p.Terminating {
			k.c.Delete(p.Key, ReasonNodeLost, fmt.Sprintf("device %s is no longer in the fleet", name))
		}
	}
}
