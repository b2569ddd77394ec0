package schedule

import (
	"encoding/json"
	"fmt"
	"math"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
)

// systemDefaultConstraints are the scheduler's defaults for pods that set
// no topologySpreadConstraints (PodTopologySpread defaultingType System).
var systemDefaultConstraints = []v1.TopologySpreadConstraint{
	{TopologyKey: v1.LabelHostname, WhenUnsatisfiable: v1.ScheduleAnyway, MaxSkew: 3},
	{TopologyKey: v1.LabelTopologyZone, WhenUnsatisfiable: v1.ScheduleAnyway, MaxSkew: 5},
}

// constraint is a topology spread constraint ready to evaluate.
type constraint struct {
	maxSkew        int32
	key            string
	selector       labels.Selector
	minDomains     int32
	affinityPolicy v1.NodeInclusionPolicy
	taintsPolicy   v1.NodeInclusionPolicy
}

// constraintsOf turns the pod's constraints with the given
// whenUnsatisfiable into evaluable ones: matchLabelKeys become
// requirements on the pod's own values, policies get their defaults
// (nodeAffinityPolicy Honor, nodeTaintsPolicy Ignore).
func constraintsOf(p *v1.Pod, list []v1.TopologySpreadConstraint, when v1.UnsatisfiableConstraintAction) []constraint {
	var out []constraint
	for _, c := range list {
		if c.WhenUnsatisfiable != when {
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(c.LabelSelector)
		if err != nil {
			sel = labels.Nothing() // validation rejects these before here
		}
		for _, key := range c.MatchLabelKeys {
			if v, ok := p.Labels[key]; ok {
				if r, err := labels.NewRequirement(key, selection.Equals, []string{v}); err == nil {
					sel = sel.Add(*r)
				}
			}
		}
		k := constraint{maxSkew: c.MaxSkew, key: c.TopologyKey, selector: sel, minDomains: 1,
			affinityPolicy: v1.NodeInclusionPolicyHonor, taintsPolicy: v1.NodeInclusionPolicyIgnore}
		if c.MinDomains != nil {
			k.minDomains = *c.MinDomains
		}
		if c.NodeAffinityPolicy != nil {
			k.affinityPolicy = *c.NodeAffinityPolicy
		}
		if c.NodeTaintsPolicy != nil {
			k.taintsPolicy = *c.NodeTaintsPolicy
		}
		out = append(out, k)
	}
	return out
}

func hasAllKeys(n *nodeInfo, cs []constraint) bool {
	for i := range cs {
		if _, ok := n.node.Labels[cs[i].key]; !ok {
			return false
		}
	}
	return true
}

// countMatching counts a node's live pods of the namespace the selector
// matches (terminating pods do not count).
func countMatching(n *nodeInfo, sel labels.Selector, namespace string) int {
	count := 0
	for _, q := range n.pods {
		if counts(q, sel, namespace) {
			count++
		}
	}
	return count
}

func counts(q *podInfo, sel labels.Selector, namespace string) bool {
	return !q.terminating && q.pod.Namespace == namespace && sel.Matches(labels.Set(q.pod.Labels))
}

// matchCounts are countMatching for every node, for one selector and
// namespace, kept in step by state.track: scoring a spread for every
// replica then costs a lookup per device, not a count.
type matchCounts struct {
	sel       labels.Selector
	namespace string
	perNode   []int
}

func (s *state) matchCountsFor(sel labels.Selector, namespace string) *matchCounts {
	// Everything and Nothing both print as "": Empty tells them apart.
	key := fmt.Sprintf("%s\x00%t\x00%s", namespace, sel.Empty(), sel.String())
	if mc := s.matchCache[key]; mc != nil {
		return mc
	}
	mc := &matchCounts{sel: sel, namespace: namespace, perNode: make([]int, len(s.nodes))}
	for i, n := range s.nodes {
		mc.perNode[i] = countMatching(n, sel, namespace)
	}
	s.matchCache[key] = mc
	return mc
}

// spreadFilter is PodTopologySpread's Filter for the DoNotSchedule
// constraints: per constraint, matching pods per domain over the devices
// that count (all topology keys present, inclusion policies met).
//
// Pods of one workload share one filter: it is kept up to date as pods are
// placed, preempted or deleted (state.track), so a 1,000-replica
// Deployment counts the fleet once, not once per replica.
type spreadFilter struct {
	c           *cycle
	constraints []constraint
	counts      []map[string]int
	self        []int
	// mins caches minMatch; nil when counts changed.
	mins []int
}

func (s *state) newSpreadFilter(c *cycle) *spreadFilter {
	if len(c.p.pod.Spec.TopologySpreadConstraints) == 0 {
		return nil
	}
	sig := spreadSignature(c.p.pod)
	if f := s.spreadCache[sig]; f != nil {
		return f
	}
	cs := constraintsOf(c.p.pod, c.p.pod.Spec.TopologySpreadConstraints, v1.DoNotSchedule)
	if len(cs) == 0 {
		return nil
	}
	f := &spreadFilter{c: c, constraints: cs, counts: make([]map[string]int, len(cs)), self: make([]int, len(cs))}
	defer func() { s.spreadCache[sig] = f }()
	podLabels := labels.Set(c.p.pod.Labels)
	for i := range cs {
		f.counts[i] = map[string]int{}
		if cs[i].selector.Matches(podLabels) {
			f.self[i] = 1
		}
	}
	for _, n := range s.nodes {
		f.add(n, n.pods, 1)
	}
	return f
}

// add counts (sign 1) or uncounts (-1) pods of a node.
func (f *spreadFilter) add(n *nodeInfo, pods []*podInfo, sign int) {
	if !hasAllKeys(n, f.constraints) {
		return
	}
	ns := f.c.p.pod.Namespace
	for i := range f.constraints {
		k := &f.constraints[i]
		if !f.c.matchesInclusion(n, k) {
			continue
		}
		v := n.node.Labels[k.key]
		count := 0
		for _, q := range pods {
			if !q.terminating && q.pod.Namespace == ns && k.selector.Matches(labels.Set(q.pod.Labels)) {
				count++
			}
		}
		f.counts[i][v] += sign * count
	}
	f.mins = nil
}

// minMatch is the global minimum over eligible domains, 0 while there are
// fewer domains than minDomains.
func (f *spreadFilter) minMatch(i int) int {
	if f.mins == nil {
		f.mins = make([]int, len(f.constraints))
		for j := range f.constraints {
			f.mins[j] = f.computeMin(j)
		}
	}
	return f.mins[i]
}

func (f *spreadFilter) computeMin(i int) int {
	if len(f.counts[i]) < int(f.constraints[i].minDomains) {
		return 0
	}
	m := math.MaxInt
	for _, v := range f.counts[i] {
		m = min(m, v)
	}
	if m == math.MaxInt {
		return 0
	}
	return m
}

// spreadSignature is what a spread filter's counts depend on: the pod's
// namespace, labels, constraints, selector, affinity and tolerations.
func spreadSignature(p *v1.Pod) string {
	b, _ := json.Marshal(struct {
		NS          string
		Labels      map[string]string
		Constraints []v1.TopologySpreadConstraint
		Selector    map[string]string
		Affinity    *v1.Affinity
		Tolerations []v1.Toleration
	}{p.Namespace, p.Labels, p.Spec.TopologySpreadConstraints, p.Spec.NodeSelector, p.Spec.Affinity, p.Spec.Tolerations})
	return string(b)
}

func (f *spreadFilter) filter(n *nodeInfo) status {
	for i := range f.constraints {
		k := &f.constraints[i]
		v, ok := n.node.Labels[k.key]
		if !ok {
			return status{unresolvable, []string{reasonSpreadLabel}}
		}
		skew := f.counts[i][v] + f.self[i] - f.minMatch(i)
		if skew > int(k.maxSkew) {
			return status{unschedulable, []string{reasonSpread}}
		}
	}
	return status{}
}

// spreadScores is PodTopologySpread's Score and NormalizeScore for the
// ScheduleAnyway constraints (or the system defaults), over the feasible
// devices; nil when there is nothing to score.
func (c *cycle) spreadScores(feasible []*nodeInfo) []int64 {
	cs, requireAll := c.scoreConstraints()
	if len(cs) == 0 {
		return nil
	}
	matches := make([]*matchCounts, len(cs))
	for i := range cs {
		matches[i] = c.s.matchCountsFor(cs[i].selector, c.p.pod.Namespace)
	}
	ignored, counts, weights := spreadDomains(feasible, cs, requireAll)
	for _, n := range c.s.nodes {
		if requireAll && !hasAllKeys(n, cs) {
			continue
		}
		for i := range cs {
			if cs[i].key == v1.LabelHostname || !c.matchesInclusion(n, &cs[i]) {
				continue
			}
			v := n.node.Labels[cs[i].key]
			if _, ok := counts[i][v]; ok {
				counts[i][v] += int64(matches[i].perNode[n.idx])
			}
		}
	}
	scores := c.s.scratch(3, len(feasible))
	for j, n := range feasible {
		if ignored[j] {
			continue
		}
		var score float64
		for i := range cs {
			v, ok := n.node.Labels[cs[i].key]
			if !ok {
				continue
			}
			var cnt int64
			if cs[i].key == v1.LabelHostname {
				cnt = int64(matches[i].perNode[n.idx])
			} else {
				cnt = counts[i][v]
			}
			score += float64(cnt)*weights[i] + float64(cs[i].maxSkew-1)
		}
		scores[j] = int64(math.Round(score))
	}
	normalizeSpread(scores, ignored)
	return scores
}

// scoreConstraints are the pod's ScheduleAnyway constraints, or the
// system defaults over its ReplicaSet's selector when it sets none
// (requireAll false: a device missing a key is scored, not ignored).
func (c *cycle) scoreConstraints() (cs []constraint, requireAll bool) {
	pod := c.p.pod
	if len(pod.Spec.TopologySpreadConstraints) > 0 {
		return constraintsOf(pod, pod.Spec.TopologySpreadConstraints, v1.ScheduleAnyway), true
	}
	sel := c.s.owners.DefaultSelector(pod)
	if sel == nil {
		return nil, false
	}
	cs = constraintsOf(pod, systemDefaultConstraints, v1.ScheduleAnyway)
	for i := range cs {
		cs[i].selector = sel
	}
	return cs, false
}

// spreadDomains are, per constraint, the domains of the feasible devices
// (counts at zero, hostname left out: it counts per device) and their
// weights; ignored marks the feasible devices missing a key.
func spreadDomains(feasible []*nodeInfo, cs []constraint, requireAll bool) (ignored []bool, counts []map[string]int64, weights []float64) {
	ignored = make([]bool, len(feasible))
	nIgnored := 0
	counts = make([]map[string]int64, len(cs))
	for i := range cs {
		counts[i] = map[string]int64{}
	}
	for j, n := range feasible {
		if requireAll && !hasAllKeys(n, cs) {
			ignored[j] = true
			nIgnored++
			continue
		}
		for i := range cs {
			if cs[i].key != v1.LabelHostname {
				counts[i][n.node.Labels[cs[i].key]] = 0
			}
		}
	}
	weights = make([]float64, len(cs))
	for i := range cs {
		size := len(counts[i])
		if cs[i].key == v1.LabelHostname {
			size = len(feasible) - nIgnored
		}
		weights[i] = math.Log(float64(size + 2))
	}
	return ignored, counts, weights
}

// normalizeSpread is the spread's NormalizeScore: the fewest matching
// pods score highest; ignored devices score 0.
func normalizeSpread(scores []int64, ignored []bool) {
	minScore, maxScore := int64(math.MaxInt64), int64(0)
	for j := range scores {
		if !ignored[j] {
			minScore = min(minScore, scores[j])
			maxScore = max(maxScore, scores[j])
		}
	}
	for j := range scores {
		switch {
		case ignored[j]:
			scores[j] = 0
		case maxScore == 0:
			scores[j] = maxNodeScore
		default:
			scores[j] = maxNodeScore * (maxScore + minScore - scores[j]) / maxScore
		}
	}
}
