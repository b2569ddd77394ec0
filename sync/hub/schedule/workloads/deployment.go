package workloads

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// runDeployments is the Deployment and ReplicaSet controllers: replicas
// created or deleted to the count, a new template rolled out by the
// Deployment's strategy.
func (k *controllers) runDeployments(ds []*appsv1.Deployment) {
	for _, d := range sortedByName(ds) {
		k.syncDeployment(d)
	}
}

// podsOf are the pods a Deployment controls, in pass order.
func (k *controllers) podsOf(d *appsv1.Deployment) []Pod {
	return k.c.Owned(Index("Deployment", d.Namespace, d.Name))
}

// scaled resolves an int-or-percent against total, rounding up or down.
func scaled(v *intstr.IntOrString, total int, up bool) int {
	if v == nil {
		return 0
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(v, total, up)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// syncDeployment is one Deployment's reconcile: pods of the current
// template are scaled to replicas; pods of older templates are replaced
// by the strategy — Recreate deletes them all and creates the new ones
// once they are gone; RollingUpdate (the default) keeps at most
// replicas+maxSurge pods and at least replicas-maxUnavailable available,
// as the Deployment controller's rolloutRolling does. A paused
// Deployment makes no rollout progress; a halted revision (the failure
// threshold) no further step at all. Its status, conditions and
// revisions follow, as the controller keeps them.
func (k *controllers) syncDeployment(d *appsv1.Deployment) {
	before := k.replicaSets(d)
	defer k.scalingEvents(d, before)
	hash := TemplateHash(&d.Spec.Template)
	rsName := d.Name + "-" + hash
	pods := k.podsOf(d)
	var current, old []Pod
	oldTerminating := false
	for _, p := range pods {
		isOld := p.Pod.Labels[LabelPodTemplateHash] != hash
		switch {
		case p.Terminating:
			oldTerminating = oldTerminating || isOld
		case isOld:
			old = append(old, p)
		default:
			current = append(current, p)
		}
	}
	want := 1
	if d.Spec.Replicas != nil {
		want = int(*d.Spec.Replicas)
	}
	st := appsv1.DeploymentStatus{Conditions: slices.Clone(d.Status.Conditions)}
	k.checkPausedConditions(d, &st)
	book := newRevisionBook(k.revisions[Index("Deployment", d.Namespace, d.Name)], pods,
		func(p Pod) string { return p.Pod.Labels[LabelPodTemplateHash] })
	cur := k.newReplicaSet(d, book, hash, rsName, &st)
	halted := ""
	if cur != nil {
		halted = cur.Halted
		if halted == "" && len(old) > 0 && d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType && hasThreshold(d.Annotations) {
			v := k.verdicts(current, d.Spec.MinReadySeconds, progressDeadline(d), nil)
			if halted = halts(d.Annotations, v, fmt.Sprintf("ReplicaSet %q", rsName)); halted != "" {
				cur.Halted, book.changed = halted, true
				k.haltEvent("Deployment", d.Namespace, d.Name, halted)
			}
		}
	}
	switch {
	case halted != "", cur == nil, d.Spec.Paused && len(old) > 0:
		// Halted, or paused mid-rollout: no pod moves to or from the
		// new revision (nor is one made for it while paused).
	case len(old) == 0 || d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType:
		for _, p := range old {
			k.c.Delete(p.Key, ReasonOutdated, outdatedDeployment(d))
		}
		if len(old) == 0 && !(oldTerminating && d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType) {
			k.scaleTo(d, hash, current, want)
		} // else Recreate: the new pods wait until the old are gone
	default:
		k.rollingUpdate(d, hash, current, old, want)
	}
	k.finishDeployment(d, hash, rsName, st.Conditions, want, halted, book)
}

// newReplicaSet is getNewReplicaSet: the current template's revision,
// made (NewReplicaSetCreated) or found (FoundNewReplicaSet) and numbered
// newest; nil while paused before it exists.
func (k *controllers) newReplicaSet(d *appsv1.Deployment, book *revisionBook, hash, rsName string, st *appsv1.DeploymentStatus) *Revision {
	if d.Spec.Paused && book.current(hash) == nil {
		return nil
	}
	cur, made := book.makeCurrent(hash, &d.Spec.Template, d.Annotations[AnnotationChangeCause])
	if progressDeadline(d) > 0 {
		switch {
		case made:
			setCondition(st, k.newCondition(appsv1.DeploymentProgressing, v1.ConditionTrue, ReasonNewRSCreated,
				fmt.Sprintf("Created new replica set %q", rsName)))
		case getCondition(st, appsv1.DeploymentProgressing) == nil:
			setCondition(st, k.newCondition(appsv1.DeploymentProgressing, v1.ConditionTrue, ReasonFoundNewRS,
				fmt.Sprintf("Found new replica set %q", rsName)))
		}
	}
	return cur
}

// finishDeployment computes the Deployment's status after the pass's
// changes, prunes old revisions once the rollout is complete, and asks
// for a pass when a pod becomes available.
func (k *controllers) finishDeployment(d *appsv1.Deployment, hash, rsName string, conds []appsv1.DeploymentCondition, want int, halted string, book *revisionBook) {
	st := k.deploymentStatus(d, hash, conds, want)
	if !d.Spec.Paused {
		k.syncRolloutStatus(d, &st, rsName, want, halted)
	}
	live := map[string]bool{}
	for _, p := range k.podsOf(d) {
		k.wakeWhenAvailable(p, d.Spec.MinReadySeconds)
		if !p.Terminating {
			live[p.Pod.Labels[LabelPodTemplateHash]] = true
		}
	}
	complete := int(st.UpdatedReplicas) == want && int(st.Replicas) == want && int(st.AvailableReplicas) == want
	if complete && book.current(hash) != nil && d.Spec.RevisionHistoryLimit != nil {
		book.prune(hash, *d.Spec.RevisionHistoryLimit, func(h string) bool { return live[h] })
	}
	k.keepRevisions("Deployment", d.Namespace, d.Name, book)
	k.res.Statuses = append(k.res.Statuses, Status{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name,
		Deployment: &st, Revision: book.maxOther("")})
}

func outdatedDeployment(d *appsv1.Deployment) string {
	return fmt.Sprintf("Deployment %s has a new template", d.Name)
}

// rollingUpdate is one step of a RollingUpdate from the old pods to the
// current template's.
func (k *controllers) rollingUpdate(d *appsv1.Deployment, hash string, current, old []Pod, want int) {
	surge, unavailable := rollingBounds(d, want)
	// Scale the new pods up within the surge; a pass that scales up does
	// not also scale down, as in the controller.
	total := len(current) + len(old)
	if up := min(want+surge-total, want-len(current)); up > 0 {
		k.createReplicas(d, hash, len(current), up)
		return
	}
	minReady := d.Spec.MinReadySeconds
	newUnavailable := 0
	for _, p := range current {
		if !k.available(p, minReady) {
			newUnavailable++
		}
	}
	maxDown := total - (want - unavailable) - newUnavailable
	if maxDown <= 0 {
		return
	}
	slices.SortStableFunc(old, deletionOrder(old))
	// Unhealthy old pods go first; they cost no availability.
	var healthy []Pod
	for _, p := range old {
		if maxDown > 0 && !k.available(p, minReady) {
			if k.mayDisrupt(p) {
				k.c.Delete(p.Key, ReasonOutdated, outdatedDeployment(d))
				maxDown--
			}
			continue
		}
		healthy = append(healthy, p)
	}
	availableNow := len(current) - newUnavailable + len(healthy)
	down := min(availableNow-(want-unavailable), len(healthy), maxDown)
	for _, p := range healthy[:max(down, 0)] {
		if !k.mayDisrupt(p) {
			break // the budget allows no more now
		}
		k.c.Delete(p.Key, ReasonOutdated, outdatedDeployment(d))
	}
}

// rollingBounds are the Deployment's maxSurge (rounded up) and
// maxUnavailable (rounded down) against want replicas; both 0 makes
// maxUnavailable 1, as the controller's ResolveFenceposts does.
func rollingBounds(d *appsv1.Deployment, want int) (surge, unavailable int) {
	var maxSurge, maxUnavailable *intstr.IntOrString
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		maxSurge, maxUnavailable = ru.MaxSurge, ru.MaxUnavailable
	} else {
		quarter := intstr.FromString("25%")
		maxSurge, maxUnavailable = &quarter, &quarter
	}
	surge, unavailable = scaled(maxSurge, want, true), scaled(maxUnavailable, want, false)
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	return surge, unavailable
}

// scaleTo creates or deletes current-template pods to reach want.
func (k *controllers) scaleTo(d *appsv1.Deployment, hash string, current []Pod, want int) {
	if len(current) < want {
		k.createReplicas(d, hash, len(current), want-len(current))
	}
	if len(current) > want {
		slices.SortStableFunc(current, deletionOrder(current))
		for _, p := range current[:len(current)-want] {
			k.c.Delete(p.Key, ReasonScaledDown, fmt.Sprintf("Deployment %s scaled to %d", d.Name, want))
		}
	}
}

func (k *controllers) createReplicas(d *appsv1.Deployment, hash string, have, n int) {
	rs := d.Name + "-" + hash
	for i := have; i < have+n; i++ {
		p := k.newPod(d.ObjectMeta, &d.Spec.Template, map[string]string{LabelPodTemplateHash: hash},
			controllerRef("ReplicaSet", rs, replicaSetUID(d.UID, hash)))
		p.Name = k.podName(p.Namespace, rs+"-", strconv.Itoa(i))
		k.create(p, "Deployment", d.ObjectMeta)
	}
}

// deletionOrder is the ReplicaSet controller's choice of pods to delete
// first: unplaced, then not running, not ready, on a device with more of
// its siblings, newer; then by name.
func deletionOrder(pods []Pod) func(a, b Pod) int {
	onNode := map[string]int{}
	for _, p := range pods {
		if p.Node != "" {
			onNode[p.Node]++
		}
	}
	phaseRank := func(p Pod) int {
		switch p.Observed.Phase {
		case v1.PodPending, "":
			return 0
		case v1.PodUnknown:
			return 1
		}
		return 2
	}
	ready := func(p Pod) int {
		if p.Observed.Ready {
			return 1
		}
		return 0
	}
	placed := func(p Pod) int {
		if p.Node != "" {
			return 1
		}
		return 0
	}
	return func(a, b Pod) int {
		return cmp.Or(
			cmp.Compare(placed(a), placed(b)),
			cmp.Compare(phaseRank(a), phaseRank(b)),
			cmp.Compare(ready(a), ready(b)),
			cmp.Compare(onNode[b.Node], onNode[a.Node]),
			b.Created.Compare(a.Created),
			cmp.Compare(a.Key.Name, b.Key.Name),
		)
	}
}

// replicaSets counts a Deployment's live pods per template hash: the
// sizes of the ReplicaSets Kubernetes would have.
func (k *controllers) replicaSets(d *appsv1.Deployment) map[string]int {
	out := map[string]int{}
	for _, p := range k.podsOf(d) {
		if !p.Terminating {
			out[p.Pod.Labels[LabelPodTemplateHash]]++
		}
	}
	return out
}

// scalingEvents records the Deployment controller's ScalingReplicaSet
// events for the ReplicaSets this pass resized.
func (k *controllers) scalingEvents(d *appsv1.Deployment, before map[string]int) {
	after := k.replicaSets(d)
	var hashes []string
	for h := range before {
		hashes = append(hashes, h)
	}
	for h := range after {
		if _, ok := before[h]; !ok {
			hashes = append(hashes, h)
		}
	}
	slices.Sort(hashes)
	for _, h := range hashes {
		from, to := before[h], after[h]
		if from == to {
			continue
		}
		dir := "up"
		if to < from {
			dir = "down"
		}
		k.c.Event(Event{Kind: "Deployment", Namespace: d.Namespace, Name: d.Name, Type: v1.EventTypeNormal, Reason: "ScalingReplicaSet",
			Message: fmt.Sprintf("Scaled %s replica set %s-%s from %d to %d", dir, d.Name, h, from, to)})
	}
}
