package fleet

import (
	"math"
	"time"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// quiet is the logger the toleration helpers want; they log nothing we use.
var quiet = logr.Discard()

// UntoleratedTaint is the first NoSchedule or NoExecute taint the
// tolerations do not tolerate.
func UntoleratedTaint(taints []v1.Taint, tolerations []v1.Toleration) (v1.Taint, bool) {
	return corev1helpers.FindMatchingUntoleratedTaint(quiet, taints, tolerations, func(t *v1.Taint) bool {
		return t.Effect == v1.TaintEffectNoSchedule || t.Effect == v1.TaintEffectNoExecute
	}, false)
}

// EvictionDue is when a pod must go from a device with these NoExecute
// taints; false when its tolerations keep it there for ever. A taint
// without timeAdded counts from the zero time.
func EvictionDue(tolerations []v1.Toleration, taints []v1.Taint) (time.Time, bool) {
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
