package schedule

import (
	"fmt"
	"math"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
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
			due, ok := evictionDue(p.pod.Spec.Tolerations, noExec)
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

// evictionDue is when a pod must go from a device with these NoExecute
// taints; false when its tolerations keep it there for ever. A taint
// without timeAdded counts from the zero time.
func evictionDue(tolerations []v1.Toleration, taints []v1.Taint) (time.Time, bool) {
	var start time.Time
	var used []v1.Toleration
	for i := range taints {
		t := &taints[i]
		if t.TimeAdded != nil && (start.IsZero() || t.TimeAdded.Time.Before(start)) {
			start = t.TimeAdded.Time
		}
		found := false
		for _, tol := range tolerations {
			if tol.ToleratesTaint(quiet, t, false) {
				used = append(used, tol)
				found = true
				break
			}
		}
		if !found {
			return time.Time{}, true // not tolerated: now
		}
	}
	minSecs := int64(math.MaxInt64)
	for _, tol := range used {
		if tol.TolerationSeconds == nil {
			continue
		}
		if *tol.TolerationSeconds <= 0 {
			return time.Time{}, true
		}
		minSecs = min(minSecs, *tol.TolerationSeconds)
	}
	if minSecs == math.MaxInt64 {
		return time.Time{}, false
	}
	return start.Add(time.Duration(minSecs) * time.Second), true
}
