package workloads

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/kinds"
)

// verdicts count a revision's updated pods that reached a verdict.
type verdicts struct{ failed, done int }

// verdict is a new revision's pod's outcome: available is a success;
// a failure reason (CrashLoopBackOff, ErrImagePull...), phase Failed, or
// not available by the deadline after it was made is a failure; the rest
// have none yet (a pass wakes at the deadline). skip leaves pods out
// (those on unreachable devices: they say nothing of the revision).
func (k *controllers) verdicts(pods []Pod, minReady int32, deadline time.Duration, skip func(Pod) bool) verdicts {
	var v verdicts
	for _, p := range pods {
		if p.Terminating || skip != nil && skip(p) {
			continue
		}
		o := p.Observed
		switch {
		case k.available(p, minReady):
			v.done++
		case o.Failure != "" || o.Phase == v1.PodFailed:
			v.done++
			v.failed++
		case deadline > 0 && !k.now.Before(p.Created.Add(deadline)):
			v.done++
			v.failed++
		case deadline > 0:
			k.wake(p.Created.Add(deadline))
		}
	}
	return v
}

// halts says whether the verdicts reach the workload's failure
// threshold (kinds.AnnotationFailureThreshold), and why, in words.
func halts(annotations map[string]string, v verdicts, what string) string {
	t, err := kinds.ParseFailureThreshold(annotations)
	if err != nil || t.Percent == 0 || v.done < t.Minimum || v.failed*100 < t.Percent*v.done {
		return ""
	}
	return fmt.Sprintf("%s rollout halted: %d of %d updated pods with a verdict failed (%d%%), reaching the failure threshold of %d%% (minimum %d verdicts)",
		what, v.failed, v.done, v.failed*100/v.done, t.Percent, t.Minimum)
}

// hasThreshold says whether the workload asks for a failure threshold.
func hasThreshold(annotations map[string]string) bool {
	t, err := kinds.ParseFailureThreshold(annotations)
	return err == nil && t.Percent > 0
}

// haltEvent records a halt on the workload, once, when it is decided.
func (k *controllers) haltEvent(kind, namespace, name, message string) {
	k.c.Event(Event{Kind: kind, Namespace: namespace, Name: name, Type: v1.EventTypeWarning, Reason: ReasonRolloutHalted, Message: message})
}
