package workloads

import (
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DaemonSet conditions of the hub's own (Kubernetes sets none).
const (
	// ConditionDevicesSkipped: devices the DaemonSet runs on are
	// unreachable and not updated; each gets the current revision when
	// it returns.
	ConditionDevicesSkipped appsv1.DaemonSetConditionType = "DevicesSkipped"
	// ConditionRolloutHalted: the failure threshold halted the rollout.
	ConditionRolloutHalted appsv1.DaemonSetConditionType = "RolloutHalted"
)

// finishDaemonSet computes the DaemonSet's status after the pass's
// changes, as the controller's updateDaemonSetStatus does, keeps its
// revisions, and asks for a pass when a pod becomes available.
func (k *controllers) finishDaemonSet(ds *appsv1.DaemonSet, hash string, nodes []*daemonNode, book *revisionBook) {
	byNode := map[string][]Pod{}
	live := map[string]bool{}
	for _, p := range k.c.Owned(Index("DaemonSet", ds.Namespace, ds.Name)) {
		k.wakeWhenAvailable(p, ds.Spec.MinReadySeconds)
		if p.Terminating {
			continue
		}
		live[p.Pod.Labels[LabelControllerHash]] = true
		if p.Node != "" {
			byNode[p.Node] = append(byNode[p.Node], p)
		}
	}
	st := appsv1.DaemonSetStatus{ObservedGeneration: ds.Generation, CollisionCount: ds.Status.CollisionCount}
	var skipped []string
	for _, dn := range nodes {
		n, run, keep := dn.n, dn.run, dn.keep
		pods := byNode[n.Name]
		if !run {
			if len(pods) > 0 {
				st.NumberMisscheduled++
			}
			if keep && unreachable(n) && !slices.ContainsFunc(pods, func(p Pod) bool { return p.Pod.Labels[LabelControllerHash] == hash }) {
				skipped = append(skipped, n.Name)
			}
			continue
		}
		st.DesiredNumberScheduled++
		if len(pods) == 0 {
			continue
		}
		st.CurrentNumberScheduled++
		slices.SortStableFunc(pods, func(a, b Pod) int { return a.Created.Compare(b.Created) })
		p := pods[0]
		if p.Observed.Ready {
			st.NumberReady++
			if k.available(p, ds.Spec.MinReadySeconds) {
				st.NumberAvailable++
			}
		}
		if p.Pod.Labels[LabelControllerHash] == hash {
			st.UpdatedNumberScheduled++
		}
	}
	st.NumberUnavailable = max(0, st.DesiredNumberScheduled-st.NumberAvailable)
	st.Conditions = k.daemonConditions(ds, book.current(hash), skipped)
	book.prune(hash, revisionLimit(ds.Spec.RevisionHistoryLimit), func(h string) bool { return live[h] })
	k.keepRevisions("DaemonSet", ds.Namespace, ds.Name, book)
	k.res.Statuses = append(k.res.Statuses, Status{Kind: "DaemonSet", Namespace: ds.Namespace, Name: ds.Name,
		DaemonSet: &st, Revision: book.maxOther("")})
}

func revisionLimit(l *int32) int32 {
	if l == nil {
		return 10
	}
	return *l
}

// daemonConditions are the hub's DaemonSet conditions, each keeping its
// transition time while its status stays.
func (k *controllers) daemonConditions(ds *appsv1.DaemonSet, cur *Revision, skipped []string) []appsv1.DaemonSetCondition {
	var out []appsv1.DaemonSetCondition
	set := func(t appsv1.DaemonSetConditionType, reason, msg string) {
		c := appsv1.DaemonSetCondition{Type: t, Status: v1.ConditionTrue, Reason: reason, Message: msg, LastTransitionTime: metav1.NewTime(k.now)}
		for _, old := range ds.Status.Conditions {
			if old.Type == t && old.Status == c.Status {
				c.LastTransitionTime = old.LastTransitionTime
			}
		}
		out = append(out, c)
	}
	if cur != nil && cur.Halted != "" {
		set(ConditionRolloutHalted, ReasonRolloutHalted, cur.Halted)
	}
	if len(skipped) > 0 {
		names := skipped[:min(len(skipped), 10)]
		more := ""
		if len(skipped) > len(names) {
			more = fmt.Sprintf(" and %d more", len(skipped)-len(names))
		}
		set(ConditionDevicesSkipped, "DeviceUnreachable", fmt.Sprintf("%d unreachable device(s) not updated, updated when they return: %s%s",
			len(skipped), strings.Join(names, ", "), more))
	}
	return out
}
