package schedule

import (
	"math"

	v1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// maxNodeScore is framework.MaxNodeScore.
const maxNodeScore = 100

// Score plugin weights of the scheduler's default profile.
const (
	weightTaintToleration = 3
	weightNodeAffinity    = 2
	weightTopologySpread  = 2
	weightResourcesFit    = 1
	weightBalanced        = 1
)

// pickBest scores the feasible devices as the default profile does and
// returns the best, the first by name on a tie (the scheduler picks one
// of the tied at random; the hub must be reproducible).
func (c *cycle) pickBest(feasible []*nodeInfo) *nodeInfo {
	if len(feasible) == 1 {
		return feasible[0]
	}
	total := c.s.scratch(0, len(feasible))
	addNormalized := func(raw []int64, weight int64, reverse bool) {
		normalize(raw, reverse)
		for j := range raw {
			total[j] += weight * raw[j]
		}
	}
	addNormalized(c.taintScores(feasible), weightTaintToleration, true)
	addNormalized(c.affinityScores(feasible), weightNodeAffinity, false)
	if spread := c.spreadScores(feasible); spread != nil {
		for j := range spread {
			total[j] += weightTopologySpread * spread[j]
		}
	}
	cpu, mem := c.p.req.NonZero()
	for j, n := range feasible {
		reqCPU, reqMem := n.nonZeroCPU+cpu, n.nonZeroMem+mem
		least := (leastAllocated(reqCPU, n.alloc.MilliCPU) + leastAllocated(reqMem, n.alloc.Memory)) / 2
		total[j] += weightResourcesFit*least + weightBalanced*balanced(reqCPU, n.alloc.MilliCPU, reqMem, n.alloc.Memory)
	}
	best := 0
	for j := range total {
		if total[j] > total[best] {
			best = j
		}
	}
	return feasible[best]
}

// normalize is helper.DefaultNormalizeScore.
func normalize(scores []int64, reverse bool) {
	var maxCount int64
	for _, s := range scores {
		maxCount = max(maxCount, s)
	}
	if maxCount == 0 {
		if reverse {
			for j := range scores {
				scores[j] = maxNodeScore
			}
		}
		return
	}
	for j := range scores {
		scores[j] = maxNodeScore * scores[j] / maxCount
		if reverse {
			scores[j] = maxNodeScore - scores[j]
		}
	}
}

// taintScores counts the PreferNoSchedule taints the pod does not tolerate.
func (c *cycle) taintScores(feasible []*nodeInfo) []int64 {
	var prefer []v1.Toleration
	for _, t := range c.p.pod.Spec.Tolerations {
		if t.Effect == "" || t.Effect == v1.TaintEffectPreferNoSchedule {
			prefer = append(prefer, t)
		}
	}
	out := c.s.scratch(1, len(feasible))
	for j, n := range feasible {
		for i := range n.node.Spec.Taints {
			t := &n.node.Spec.Taints[i]
			if t.Effect != v1.TaintEffectPreferNoSchedule {
				continue
			}
			tolerated := false
			for k := range prefer {
				if prefer[k].ToleratesTaint(quiet, t, false) {
					tolerated = true
					break
				}
			}
			if !tolerated {
				out[j]++
			}
		}
	}
	return out
}

// affinityScores sums the weights of the preferred node affinity terms
// each device matches.
func (c *cycle) affinityScores(feasible []*nodeInfo) []int64 {
	out := c.s.scratch(2, len(feasible))
	a := c.p.pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || len(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		return out
	}
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution)
	if err != nil {
		return out
	}
	for j, n := range feasible {
		out[j] = terms.Score(n.node)
	}
	return out
}

// leastAllocated is LeastAllocated's per-resource score.
func leastAllocated(requested, capacity int64) int64 {
	if capacity == 0 || requested > capacity {
		return 0
	}
	return (capacity - requested) * maxNodeScore / capacity
}

// balanced is NodeResourcesBalancedAllocation over CPU and memory.
func balanced(cpu, cpuCap, mem, memCap int64) int64 {
	fraction := func(req, capacity int64) float64 {
		if capacity == 0 {
			return 1
		}
		return math.Min(float64(req)/float64(capacity), 1)
	}
	std := math.Abs(fraction(cpu, cpuCap)-fraction(mem, memCap)) / 2
	return int64((1 - std) * maxNodeScore)
}

// scratch returns the k-th reusable score list, zeroed, of length n: a
// pass scores thousands of devices for each of thousands of pods.
func (s *state) scratch(k, n int) []int64 {
	if cap(s.scores[k]) < n {
		s.scores[k] = make([]int64, n)
	}
	out := s.scores[k][:n]
	clear(out)
	return out
}
