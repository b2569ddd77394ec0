package schedule

import (
	"cmp"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// The preemption PostFilter's words.
const (
	reasonNotHelpful = "Preemption is not helpful for scheduling"
	reasonNoVictims  = "No preemption victims found for incoming pod"
)

// candidate is a device where deleting victims makes the pod fit.
type candidate struct {
	node       *nodeInfo
	victims    []*podInfo // most important first
	violations int
}

// preempt is DefaultPreemption: on the devices where only resources or
// skew stood in the way (a window of them in a large fleet), find the
// fewest lower-priority victims that make the pod fit (reprieving
// PDB-protected pods first), pick one device by the scheduler's
// criteria, delete its victims and nominate the device.
// It returns the nominated device and, when there is none, the message.
func (s *state) preempt(c *cycle, cands []*nodeInfo, statuses []status) (nominated, message string) {
	p := c.p
	if !s.admission.PreemptsOthers(p.pod) {
		return "", "not eligible due to preemptionPolicy=Never."
	}
	if n := s.byName[p.pod.Status.NominatedNodeName]; n != nil {
		for _, q := range n.pods {
			if q.terminating && q.priority < p.priority {
				return n.name, "not eligible due to a terminating pod on the nominated node."
			}
		}
	}
	hist := map[string]int{}
	if skipped := len(s.nodes) - len(cands); skipped > 0 {
		hist[reasonNotHelpful] += skipped
	}
	var potential []*nodeInfo
	for i, n := range cands {
		if statuses[i].code == unresolvable {
			hist[reasonNotHelpful]++
		} else {
			potential = append(potential, n)
		}
	}
	found := s.dryRun(c, potential, hist)
	if len(found) == 0 {
		return "", availability(len(s.nodes), hist)
	}
	// Ties go to the first device by name, whatever the offset.
	slices.SortFunc(found, func(a, b candidate) int { return cmp.Compare(a.node.idx, b.node.idx) })
	best := pickCandidate(found)
	victims := make([]types.NamespacedName, len(best.victims))
	for i, v := range best.victims {
		victims[i] = v.key
		s.markDeleted(v, ReasonPreempted, fmt.Sprintf("Preempted by pod %s on node %s", p.key, best.node.name))
	}
	s.unnominate(p)
	s.nominated[best.node.name] = append(s.nominated[best.node.name], p)
	s.plan.Preemptions = append(s.plan.Preemptions, Preemption{Pod: p.key, Device: best.node.name, Victims: victims})
	return best.node.name, ""
}

// dryRun is DryRunPreemption: from an offset, stop once enough candidates
// are found (one without PDB violations among them); a pod with none
// found has tried every device, so hist counts them all.
func (s *state) dryRun(c *cycle, potential []*nodeInfo, hist map[string]int) []candidate {
	offset, enough := candidateWindow(c.p.key, len(potential))
	var found []candidate
	nonViolating := 0
	for j := range potential {
		cand, ok := s.selectVictims(c, potential[(offset+j)%len(potential)])
		if !ok {
			hist[reasonNoVictims]++
			continue
		}
		found = append(found, cand)
		if cand.violations == 0 {
			nonViolating++
		}
		if nonViolating > 0 && len(found) >= enough {
			break
		}
	}
	return found
}

// DefaultPreemption's defaults: the dry run looks for candidates on at
// least 10% of the devices where preemption may help, and at least 100.
const (
	minCandidateNodesPercentage = 10
	minCandidateNodesAbsolute   = 100
)

// candidateWindow is GetOffsetAndNumCandidates made deterministic: the
// dry run starts at an offset drawn from a hash of the pod's name (the
// scheduler draws it at random, which spreads preemption over the fleet
// the same way) and may stop after enough candidates.
func candidateWindow(pod types.NamespacedName, devices int) (offset, enough int) {
	if devices == 0 {
		return 0, 0
	}
	enough = min(max(devices*minCandidateNodesPercentage/100, minCandidateNodesAbsolute), devices)
	h := fnv.New32a()
	h.Write([]byte(pod.String()))
	return int(h.Sum32() % uint32(devices)), enough
}

// selectVictims is selectVictimsOnNode, as a dry run that leaves the
// device as it found it.
func (s *state) selectVictims(c *cycle, n *nodeInfo) (candidate, bool) {
	var potential []*podInfo
	for _, q := range n.pods {
		if !q.terminating && q.priority < c.p.priority {
			potential = append(potential, q)
		}
	}
	if len(potential) == 0 {
		return candidate{}, false
	}
	remove := s.detach
	restore := func(q *podInfo) { s.attach(q, n) }
	for _, q := range potential {
		remove(q)
	}
	if c.filter(n).code != fits {
		for _, q := range potential {
			restore(q)
		}
		return candidate{}, false
	}
	slices.SortStableFunc(potential, moreImportant)
	violating, ok := s.splitByPDB(potential)
	cand := candidate{node: n}
	reprieve := func(q *podInfo) bool {
		restore(q)
		if c.filter(n).code == fits {
			return true
		}
		remove(q)
		cand.victims = append(cand.victims, q)
		return false
	}
	for _, q := range violating {
		if !reprieve(q) {
			cand.violations++
		}
	}
	for _, q := range ok {
		reprieve(q)
	}
	for _, q := range cand.victims {
		restore(q)
	}
	slices.SortStableFunc(cand.victims, moreImportant)
	return cand, true
}

// moreImportant orders pods by priority, then the earlier started first.
func moreImportant(a, b *podInfo) int {
	if c := cmp.Compare(b.priority, a.priority); c != 0 {
		return c
	}
	return startTime(a).Compare(startTime(b))
}

func startTime(p *podInfo) time.Time {
	if p.pod.Status.StartTime != nil {
		return p.pod.Status.StartTime.Time
	}
	return p.created
}

// splitByPDB is filterPodsWithPDBViolation: walking the pods in order,
// each matching budget is charged one disruption; a pod that drives one
// below zero is violating.
func (s *state) splitByPDB(pods []*podInfo) (violating, ok []*podInfo) {
	allowed := make([]int32, len(s.pdbs))
	selectors := make([]labels.Selector, len(s.pdbs))
	for i, pdb := range s.pdbs {
		allowed[i] = pdb.Status.DisruptionsAllowed
		if sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector); err == nil {
			selectors[i] = sel
		}
	}
	for _, q := range pods {
		violated := false
		if len(q.pod.Labels) > 0 {
			for i, pdb := range s.pdbs {
				sel := selectors[i]
				if pdb.Namespace != q.pod.Namespace || sel == nil || sel.Empty() || !sel.Matches(labels.Set(q.pod.Labels)) {
					continue
				}
				if _, done := pdb.Status.DisruptedPods[q.pod.Name]; done {
					continue
				}
				allowed[i]--
				if allowed[i] < 0 {
					violated = true
				}
			}
		}
		if violated {
			violating = append(violating, q)
		} else {
			ok = append(ok, q)
		}
	}
	return violating, ok
}

// pickCandidate is pickOneNodeForPreemption: fewest PDB violations, then
// the lowest highest-priority victim, the smallest priority sum, the
// fewest victims, the latest start among the most important victims, and
// finally the first device by name.
func pickCandidate(cs []candidate) candidate {
	sum := func(c candidate) int64 {
		var t int64
		for _, v := range c.victims {
			t += int64(v.priority) + math.MaxInt32 + 1
		}
		return t
	}
	top := func(c candidate) int32 {
		if len(c.victims) == 0 {
			return math.MinInt32
		}
		return c.victims[0].priority
	}
	earliestTop := func(c candidate) time.Time {
		var t time.Time
		for _, v := range c.victims {
			if v.priority != top(c) {
				continue
			}
			if st := startTime(v); t.IsZero() || st.Before(t) {
				t = st
			}
		}
		return t
	}
	best := cs[0]
	for _, c := range cs[1:] {
		d := cmp.Or(
			cmp.Compare(c.violations, best.violations),
			cmp.Compare(top(c), top(best)),
			cmp.Compare(sum(c), sum(best)),
			cmp.Compare(len(c.victims), len(best.victims)),
			-earliestTop(c).Compare(earliestTop(best)),
		)
		if d < 0 {
			best = c
		}
	}
	return best
}

var _ = v1.PreemptNever
