package schedule

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// scheduleOne is one scheduling cycle: the nominated device if it still
// fits, else filter every candidate device, score the feasible ones and
// bind to the best; with none, try preemption and leave the pod pending
// with the scheduler's reason.
func (s *state) scheduleOne(p *podInfo) {
	if p.unschedulable != "" {
		s.plan.Pending = append(s.plan.Pending, Pending{Pod: p.key, Message: p.unschedulable})
		return
	}
	if len(s.nodes) == 0 {
		s.plan.Pending = append(s.plan.Pending, Pending{Pod: p.key, Message: "no devices available to schedule pods"})
		return
	}
	c := s.newCycle(p)
	if n := s.byName[p.pod.Status.NominatedNodeName]; n != nil && c.filter(n).code == fits {
		s.bind(p, n)
		return
	}
	cands := c.candidates()
	feasible := s.feasible[:0]
	for _, n := range cands {
		if c.filter(n).code == fits {
			feasible = append(feasible, n)
		}
	}
	s.feasible = feasible // reused: one cycle's list, not one per pod
	if len(feasible) > 0 {
		s.bind(p, c.pickBest(feasible))
		return
	}
	// Only a pod that fits nowhere needs every device's reasons.
	statuses := make([]status, len(cands))
	for i, n := range cands {
		statuses[i] = c.filter(n)
	}
	hist := map[string]int{}
	for _, st := range statuses {
		for _, r := range st.reasons {
			hist[r]++
		}
	}
	if skipped := len(s.nodes) - len(cands); skipped > 0 {
		hist[fmt.Sprintf(reasonPrefilterFormat, "NodeAffinity")] += skipped
	}
	msg := availability(len(s.nodes), hist)
	nominated, post := s.preempt(c, cands, statuses)
	if post != "" {
		msg += " preemption: " + post
	}
	s.plan.Pending = append(s.plan.Pending, Pending{Pod: p.key, Message: msg, NominatedNodeName: nominated})
	s.event("Pod", p.key, v1.EventTypeWarning, "FailedScheduling", msg)
}

// availability is the scheduler's FitError text with devices for nodes:
// "0/N devices are available: " then "count reason" sorted as strings.
func availability(total int, hist map[string]int) string {
	parts := make([]string, 0, len(hist))
	for r, n := range hist {
		parts = append(parts, fmt.Sprintf("%d %s", n, r))
	}
	sort.Strings(parts)
	msg := fmt.Sprintf("0/%d devices are available:", total)
	if len(parts) > 0 {
		msg += " " + strings.Join(parts, ", ") + "."
	}
	return msg
}

// bind places a pod on a device.
func (s *state) bind(p *podInfo, n *nodeInfo) {
	s.unnominate(p)
	s.attach(p, n)
	s.plan.Bindings = append(s.plan.Bindings, Binding{Pod: p.key, Device: n.name})
	s.event("Pod", p.key, v1.EventTypeNormal, "Scheduled", fmt.Sprintf("Successfully assigned %s to %s", p.key, n.name))
}

func sortNodes(ns []*nodeInfo) {
	slices.SortFunc(ns, func(a, b *nodeInfo) int { return cmp.Compare(a.name, b.name) })
}
