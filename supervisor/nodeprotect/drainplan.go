package nodeprotect

import (
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// drainPlan is the buckets of a drain in the order they run: the
// configured ones, lowest priority first.
func drainPlan(configured []ShutdownBucket) []ShutdownBucket {
	buckets := append([]ShutdownBucket(nil), configured...)
	sort.SliceStable(buckets, func(i, j int) bool { return buckets[i].Priority < buckets[j].Priority })
	return buckets
}

// drainCandidate is a pod as a drain sees it.
type drainCandidate struct {
	UID      types.UID
	Priority int32
	// Stoppable: it runs and nothing is stopping it yet.
	Stoppable bool
}

// drainCandidates describes pod instances for bucketPods.
func drainCandidates(instances []*lifecycle.Instance) []drainCandidate {
	out := make([]drainCandidate, 0, len(instances))
	for _, in := range instances {
		out = append(out, drainCandidate{UID: in.UID(), Priority: lifecycle.PriorityOf(in.Pod),
			Stoppable: in.Live() && in.Failed == nil && !in.Terminating})
	}
	return out
}

// bucketPods picks the pods bucket i of a plan stops: the stoppable ones
// with priority from the bucket's up to the next bucket's. The first
// bucket also takes those below its own priority, so every pod is in one.
func bucketPods(pods []drainCandidate, plan []ShutdownBucket, i int) []types.UID {
	upper := int32(1<<31 - 1)
	if i+1 < len(plan) {
		upper = plan[i+1].Priority
	}
	var out []types.UID
	for _, p := range pods {
		if p.Stoppable && (p.Priority >= plan[i].Priority || i == 0) && p.Priority < upper {
			out = append(out, p.UID)
		}
	}
	return out
}
