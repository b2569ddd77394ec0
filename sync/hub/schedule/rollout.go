package schedule

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// available is a pod Ready for at least minReadySeconds.
func (s *state) available(p *podInfo, minReadySeconds int32) bool {
	for _, c := range p.pod.Status.Conditions {
		if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
			return !c.LastTransitionTime.Add(time.Duration(minReadySeconds) * time.Second).After(s.now)
		}
	}
	return false
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
// as the Deployment controller's rolloutRolling does.
func (s *state) syncDeployment(d *appsv1.Deployment) {
	before := s.replicaSets(d)
	defer s.scalingEvents(d, before)
	hash := TemplateHash(&d.Spec.Template)
	var current, old []*podInfo
	oldTerminating := false
	for _, p := range s.podsOf(d) {
		isOld := p.pod.Labels[LabelPodTemplateHash] != hash
		switch {
		case p.terminating:
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
	outdated := fmt.Sprintf("Deployment %s has a new template", d.Name)
	if len(old) == 0 || d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
		for _, p := range old {
			s.markDeleted(p, ReasonOutdated, outdated)
		}
		if len(old) > 0 || oldTerminating && d.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType {
			return // Recreate: the new pods wait until the old are gone
		}
		s.scaleTo(d, hash, current, want)
		return
	}
	var maxSurge, maxUnavailable *intstr.IntOrString
	if ru := d.Spec.Strategy.RollingUpdate; ru != nil {
		maxSurge, maxUnavailable = ru.MaxSurge, ru.MaxUnavailable
	} else {
		quarter := intstr.FromString("25%")
		maxSurge, maxUnavailable = &quarter, &quarter
	}
	surge := scaled(maxSurge, want, true)
	unavailable := scaled(maxUnavailable, want, false)
	if surge == 0 && unavailable == 0 {
		unavailable = 1
	}
	// Scale the new pods up within the surge; a pass that scales up does
	// not also scale down, as in the controller.
	total := len(current) + len(old)
	if up := min(want+surge-total, want-len(current)); up > 0 {
		s.createReplicas(d, hash, len(current), up)
		return
	}
	minReady := d.Spec.MinReadySeconds
	newUnavailable := 0
	for _, p := range current {
		if !s.available(p, minReady) {
			newUnavailable++
		}
	}
	maxDown := total - (want - unavailable) - newUnavailable
	if maxDown <= 0 {
		return
	}
	slices.SortStableFunc(old, deletionOrder(old))
	// Unhealthy old pods go first; they cost no availability.
	var healthy []*podInfo
	for _, p := range old {
		if maxDown > 0 && !s.available(p, minReady) {
			s.markDeleted(p, ReasonOutdated, outdated)
			maxDown--
			continue
		}
		healthy = append(healthy, p)
	}
	availableNow := len(current) - newUnavailable + len(healthy)
	down := min(availableNow-(want-unavailable), len(healthy), maxDown)
	for _, p := range healthy[:max(down, 0)] {
		s.markDeleted(p, ReasonOutdated, outdated)
	}
}

// scaleTo creates or deletes current-template pods to reach want.
func (s *state) scaleTo(d *appsv1.Deployment, hash string, current []*podInfo, want int) {
	if len(current) < want {
		s.createReplicas(d, hash, len(current), want-len(current))
	}
	if len(current) > want {
		slices.SortStableFunc(current, deletionOrder(current))
		for _, p := range current[:len(current)-want] {
			s.markDeleted(p, ReasonScaledDown, fmt.Sprintf("Deployment %s scaled to %d", d.Name, want))
		}
	}
}

func (s *state) createReplicas(d *appsv1.Deployment, hash string, have, n int) {
	rs := d.Name + "-" + hash
	for i := have; i < have+n; i++ {
		p := s.newPod(d.ObjectMeta, &d.Spec.Template, map[string]string{LabelPodTemplateHash: hash},
			controllerRef("ReplicaSet", rs, replicaSetUID(d.UID, hash)))
		p.Name = s.podName(p.Namespace, rs+"-", strconv.Itoa(i))
		s.admitCreated(p, "Deployment", d.ObjectMeta)
	}
}

// daemonNode is one device's view of a DaemonSet.
type daemonNode struct {
	n            *nodeInfo
	run, keep    bool
	current, old []*podInfo
	terminating  bool
	hasAvailable bool
}

// syncDaemonSet is one DaemonSet's reconcile: a pod of the current
// template on every device that should run one; none where it must not
// continue; older pods replaced by the update strategy — OnDelete only
// when deleted, RollingUpdate at most maxUnavailable devices at a time
// (not-ready old pods first), or with maxSurge the new pod beside the old
// until it is available. A new pod waits for the device's terminating one.
func (s *state) syncDaemonSet(ds *appsv1.DaemonSet, hash string, probe *v1.Pod, affinity nodeaffinity.RequiredNodeAffinity) {
	byNode := map[string]*daemonNode{}
	var nodes []*daemonNode
	for _, n := range s.nodes {
		run, keep := daemonShouldRun(probe, affinity, n)
		dn := &daemonNode{n: n, run: run, keep: keep}
		byNode[n.name] = dn
		nodes = append(nodes, dn)
	}
	for _, p := range s.daemonPods(ds) {
		node := p.pod.Spec.NodeName
		if node == "" {
			if pins := pinnedNodes(p.pod); len(pins) == 1 {
				node = pins[0]
			}
		}
		dn := byNode[node]
		switch {
		case dn == nil:
			s.markDeleted(p, ReasonNotEligible, fmt.Sprintf("device %q is gone", node))
		case p.terminating:
			dn.terminating = true
		case !dn.keep:
			s.markDeleted(p, ReasonNotEligible, fmt.Sprintf("device %s no longer matches DaemonSet %s", node, ds.Name))
			dn.terminating = true
		case p.pod.Labels[LabelControllerHash] != hash:
			dn.old = append(dn.old, p)
		default:
			dn.current = append(dn.current, p)
		}
	}
	if len(nodes) > 0 && !slices.ContainsFunc(nodes, func(dn *daemonNode) bool { return dn.run || dn.keep }) {
		s.plan.Events = append(s.plan.Events, Event{Kind: "DaemonSet", Namespace: ds.Namespace, Name: ds.Name,
			Type: v1.EventTypeWarning, Reason: "NoMatchingDevices",
			Message: fmt.Sprintf("0/%d devices match the DaemonSet's nodeSelector, affinity and tolerations", len(nodes))})
	}
	minReady := ds.Spec.MinReadySeconds
	desired, unavailable := 0, 0
	for _, dn := range nodes {
		if !dn.run && !dn.keep {
			continue
		}
		desired++
		for _, p := range append(slices.Clone(dn.current), dn.old...) {
			dn.hasAvailable = dn.hasAvailable || s.available(p, minReady)
		}
		if !dn.hasAvailable {
			unavailable++
		}
	}
	onDelete := ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
	var maxUnavailable, maxSurge *intstr.IntOrString
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		maxUnavailable, maxSurge = ru.MaxUnavailable, ru.MaxSurge
	} else {
		one := intstr.FromInt32(1)
		maxUnavailable = &one
	}
	budget := scaled(maxUnavailable, desired, true) - unavailable
	surge := scaled(maxSurge, desired, true) - countSurging(nodes)
	outdated := fmt.Sprintf("DaemonSet %s has a new template", ds.Name)
	for _, dn := range nodes {
		slices.SortStableFunc(dn.current, func(a, b *podInfo) int { return a.created.Compare(b.created) })
		for _, extra := range dn.current[min(1, len(dn.current)):] {
			s.markDeleted(extra, ReasonScaledDown, fmt.Sprintf("more than one pod of DaemonSet %s on device %s", ds.Name, dn.n.name))
		}
		switch {
		case len(dn.current) > 0:
			// The new pod is there: the old go once it is available (at
			// once without surge, where they should not coexist).
			if len(dn.old) > 0 && (scaled(maxSurge, desired, true) == 0 || s.available(dn.current[0], minReady)) {
				for _, p := range dn.old {
					s.markDeleted(p, ReasonOutdated, outdated)
				}
			}
		case len(dn.old) > 0:
			for _, extra := range dn.old[1:] {
				s.markDeleted(extra, ReasonScaledDown, fmt.Sprintf("more than one pod of DaemonSet %s on device %s", ds.Name, dn.n.name))
			}
			switch {
			case onDelete:
			case scaled(maxSurge, desired, true) > 0:
				if surge > 0 && dn.run {
					s.createDaemonPod(ds, hash, dn.n)
					surge--
				}
			case !s.available(dn.old[0], minReady):
				s.markDeleted(dn.old[0], ReasonOutdated, outdated)
			case budget > 0:
				s.markDeleted(dn.old[0], ReasonOutdated, outdated)
				budget--
			}
		case dn.run && !dn.terminating:
			s.createDaemonPod(ds, hash, dn.n)
		}
	}
}

// countSurging counts devices where a new pod runs beside an old one.
func countSurging(nodes []*daemonNode) int {
	n := 0
	for _, dn := range nodes {
		if len(dn.current) > 0 && len(dn.old) > 0 {
			n++
		}
	}
	return n
}

// replicaSets counts a Deployment's live pods per template hash: the
// sizes of the ReplicaSets Kubernetes would have.
func (s *state) replicaSets(d *appsv1.Deployment) map[string]int {
	out := map[string]int{}
	for _, p := range s.podsOf(d) {
		if !p.terminating {
			out[p.pod.Labels[LabelPodTemplateHash]]++
		}
	}
	return out
}

// scalingEvents records the Deployment controller's ScalingReplicaSet
// events for the ReplicaSets this pass resized.
func (s *state) scalingEvents(d *appsv1.Deployment, before map[string]int) {
	after := s.replicaSets(d)
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
		s.event("Deployment", types.NamespacedName{Namespace: d.Namespace, Name: d.Name}, v1.EventTypeNormal, "ScalingReplicaSet",
			fmt.Sprintf("Scaled %s replica set %s-%s from %d to %d", dir, d.Name, h, from, to))
	}
}
