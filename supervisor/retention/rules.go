package retention

import (
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// The retention rules for finished container instances and their logs.
// Each container keeps the attempt about to start and the
// MaxDeadPerContainer before it; the device keeps at most
// MaxDeadContainers finished instances, never a container's newest
// (what its status and logs show).

// staleInstances lists the kept instances of a container older than
// attempt keepFrom.
func staleInstances(kept []runtime.Kept, keepFrom int) []string {
	var out []string
	for _, k := range kept {
		if _, _, n, ok := vocab.ParseInstanceID(k.InstanceID); ok && n < keepFrom {
			out = append(out, k.InstanceID)
		}
	}
	return out
}

// staleLogs lists the log files ("<attempt>.log", rotated
// "<attempt>.log.N") of attempts older than keepFrom.
func staleLogs(paths []string, keepFrom int) []string {
	var out []string
	for _, p := range paths {
		attempt, _, found := strings.Cut(filepath.Base(p), ".")
		if n, err := strconv.Atoi(attempt); found && err == nil && n < keepFrom {
			out = append(out, p)
		}
	}
	return out
}

// deviceGCCandidates returns the finished instances the device may remove
// to keep at most max, oldest first, and how many of them must go (0: none).
// A container's newest finished instance is never a candidate.
func deviceGCCandidates(kept []runtime.Kept, max int) (candidates []runtime.Kept, excess int) {
	if max <= 0 {
		return nil, 0
	}
	var finished []runtime.Kept
	for _, k := range kept {
		if !k.Finished.IsZero() {
			finished = append(finished, k)
		}
	}
	if len(finished) <= max {
		return nil, 0
	}
	type newest struct {
		id      string
		attempt int
	}
	newestOf := map[string]newest{} // uid_container -> its highest attempt
	for _, k := range finished {
		if uid, name, n, ok := vocab.ParseInstanceID(k.InstanceID); ok {
			key := string(uid) + "_" + name
			if cur, seen := newestOf[key]; !seen || n > cur.attempt {
				newestOf[key] = newest{k.InstanceID, n}
			}
		}
	}
	keep := map[string]bool{}
	for _, n := range newestOf {
		keep[n.id] = true
	}
	sort.SliceStable(finished, func(i, j int) bool { return finished[i].Finished.Before(finished[j].Finished) })
	for _, k := range finished {
		if !keep[k.InstanceID] {
			candidates = append(candidates, k)
		}
	}
	return candidates, len(finished) - max
}
