package workloads

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// StatefulSetRolloutHalted is the StatefulSet condition of a rollout the
// failure threshold halted (the DaemonSet's ConditionRolloutHalted).
const StatefulSetRolloutHalted = appsv1.StatefulSetConditionType(ConditionRolloutHalted)

// statefulRevisions is getStatefulSetRevisions over the hub's revisions:
// the update revision is the set's template, numbered newest (made, or
// numbered again on a rollback); the current revision is the one the
// stored status.currentRevision names, with its stored template, or the
// update revision when it names none the set has. A set whose status was
// never stored (made before the hub kept it) finds it from its pods.
func (k *controllers) statefulRevisions(s *appsv1.StatefulSet, owned []Pod) (book *revisionBook, current, update revision) {
	prefix := s.Name + "-"
	book = newRevisionBook(k.revisions[Index("StatefulSet", s.Namespace, s.Name)], owned, func(p Pod) string {
		h, _ := strings.CutPrefix(p.Pod.Labels[LabelControllerHash], prefix)
		return h
	})
	book.makeCurrent(TemplateHash(&s.Spec.Template), &s.Spec.Template, s.Annotations[AnnotationChangeCause])
	update = updateRevision(s)
	name := s.Status.CurrentRevision
	switch {
	case name == "":
		return book, currentFromPods(s, owned, update), update
	case name == update.Name:
		return book, update, update
	}
	h, ok := strings.CutPrefix(name, prefix)
	r := book.current(h)
	if !ok || r == nil {
		return book, update, update
	}
	current = revision{Name: name, Template: r.Template}
	if current.Template == nil {
		current.Template = r.Kept
	}
	if current.Template == nil {
		// Numbered from pods made before templates were kept: one of
		// them still tells it.
		for _, p := range owned {
			if p.Pod.Labels[LabelControllerHash] == name {
				current.Template = templateOf(p.Pod)
				break
			}
		}
	}
	return book, current, update
}

// atCurrentRevision is newVersionedStatefulSetPod's choice: with a
// RollingUpdate, a pod below the partition (without rollingUpdate, below
// the current replicas) is made at the current revision, the rest at the
// update revision.
func atCurrentRevision(s *appsv1.StatefulSet, ord int) bool {
	start := int(startordinal(s))
	ru := s.Spec.UpdateStrategy.RollingUpdate
	if ru == nil {
		return s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType && ord < start+int(s.Status.CurrentReplicas)
	}
	return ru.Partition != nil && ord < start+int(*ru.Partition)
}

// partition is the RollingUpdate's partition (0 without one).
func partition(s *appsv1.StatefulSet) int {
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return int(*ru.Partition)
	}
	return 0
}

// statefulHalt checks the failure threshold over the pods already at the
// update revision while pods at or above the partition are still to be
// updated; it returns why the rollout is halted ("" while it is not).
// A halt stops further ordinals from being updated until undo or a new
// template.
func (k *controllers) statefulHalt(sp *statefulSetPods, book *revisionBook) string {
	s := sp.set
	cur := book.current(TemplateHash(&s.Spec.Template))
	if cur.Halted != "" {
		return cur.Halted
	}
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType || !hasThreshold(s.Annotations) {
		return ""
	}
	var updated []Pod
	rolling := false
	for i, p := range sp.replicas {
		switch {
		case p == nil:
		case p.Pod.Labels[LabelControllerHash] == sp.update.Name:
			updated = append(updated, *p)
		case i >= partition(s):
			rolling = true
		}
	}
	if !rolling {
		return ""
	}
	v := k.verdicts(updated, sp.minReady, daemonVerdictDeadline, nil)
	msg := halts(s.Annotations, v, fmt.Sprintf("ControllerRevision %q", sp.update.Name))
	if msg == "" {
		return ""
	}
	cur.Halted, book.changed = msg, true
	k.haltEvent("StatefulSet", s.Namespace, s.Name, msg)
	return msg
}

// finishStatefulSet computes the set's status over its pods after the
// pass's changes, completes a rolling update (currentRevision becomes
// updateRevision once every replica is updated and ready), prunes its
// revision history and asks for a pass when a pod becomes available.
func (k *controllers) finishStatefulSet(s *appsv1.StatefulSet, current, update revision, book *revisionBook, halted string) {
	pods := k.c.Owned(Index("StatefulSet", s.Namespace, s.Name))
	st := k.statefulSetStatus(s, pods, current, update)
	// completeRollingUpdate
	if s.Spec.UpdateStrategy.Type == appsv1.RollingUpdateStatefulSetStrategyType &&
		st.UpdatedReplicas == st.Replicas && st.ReadyReplicas == st.Replicas {
		st.CurrentReplicas, st.CurrentRevision = st.UpdatedReplicas, st.UpdateRevision
	}
	st.Conditions = k.statefulConditions(s, halted)
	live := map[string]bool{current.Name: true, update.Name: true}
	for _, p := range pods {
		live[p.Pod.Labels[LabelControllerHash]] = true
		k.wakeWhenAvailable(p, s.Spec.MinReadySeconds)
	}
	book.truncate(revisionLimit(s.Spec.RevisionHistoryLimit), func(hash string) bool { return live[s.Name+"-"+hash] })
	k.keepRevisions("StatefulSet", s.Namespace, s.Name, book)
	k.res.Statuses = append(k.res.Statuses, Status{Kind: "StatefulSet", Namespace: s.Namespace, Name: s.Name,
		StatefulSet: &st, Revision: book.maxOther("")})
}

// statefulSetStatus is computeReplicaStatus over the set's pods with
// its revisions and the generation this pass reconciled. collisionCount
// is 0: revision names are the template's hash, and never collide in
// the hub's book (one revision per hash).
func (k *controllers) statefulSetStatus(s *appsv1.StatefulSet, pods []Pod, current, update revision) appsv1.StatefulSetStatus {
	sp := sortStatefulSetPods(s, pods, current, update, k)
	zero := int32(0)
	st := appsv1.StatefulSetStatus{ObservedGeneration: s.Generation, CurrentRevision: current.Name,
		UpdateRevision: update.Name, CollisionCount: &zero}
	count := func(p *Pod) {
		if p == nil {
			return
		}
		st.Replicas++
		if runningAndReady(*p) {
			st.ReadyReplicas++
			if k.runningAndAvailable(*p, sp.minReady) {
				st.AvailableReplicas++
			}
		}
		if !p.Terminating {
			rev := p.Pod.Labels[LabelControllerHash]
			if rev == current.Name {
				st.CurrentReplicas++
			}
			if rev == update.Name {
				st.UpdatedReplicas++
			}
		}
	}
	for _, p := range sp.replicas {
		count(p)
	}
	for _, p := range sp.condemned {
		count(p)
	}
	return st
}

// statefulConditions are the hub's StatefulSet conditions (a halt), each
// keeping its transition time while its status stays.
func (k *controllers) statefulConditions(s *appsv1.StatefulSet, halted string) []appsv1.StatefulSetCondition {
	if halted == "" {
		return nil
	}
	c := appsv1.StatefulSetCondition{Type: StatefulSetRolloutHalted, Status: v1.ConditionTrue, Reason: ReasonRolloutHalted,
		Message: halted, LastTransitionTime: metav1.NewTime(k.now)}
	for _, old := range s.Status.Conditions {
		if old.Type == c.Type && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	return []appsv1.StatefulSetCondition{c}
}

// truncate is the StatefulSet controller's truncateHistory: of the
// revisions no pod carries that are neither current nor update, the
// oldest beyond limit go.
func (b *revisionBook) truncate(limit int32, live func(hash string) bool) {
	var history []Revision
	for _, r := range b.revs {
		if !live(r.Hash) {
			history = append(history, r)
		}
	}
	if len(history) <= int(limit) {
		return
	}
	slices.SortFunc(history, func(x, y Revision) int { return cmp.Compare(x.Number, y.Number) })
	drop := map[string]bool{}
	for _, r := range history[:len(history)-int(max(limit, 0))] {
		drop[r.Hash] = true
	}
	b.revs = slices.DeleteFunc(b.revs, func(r Revision) bool { return drop[r.Hash] })
	b.changed = true
}
