package workloads

import (
	"fmt"
	"slices"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// daemonNode is one device's view of a DaemonSet.
type daemonNode struct {
	n            Node
	run, keep    bool
	current, old []Pod
	terminating  bool
	hasAvailable bool
}

// daemonRollout is one DaemonSet's update budget in one pass.
type daemonRollout struct {
	ds       *appsv1.DaemonSet
	hash     string
	outdated string // the deletion message of an old pod
	minReady int32
	onDelete bool
	// surging: the strategy surges (maxSurge > 0 of the desired devices).
	surging bool
	// budget and surge are the devices still allowed to go unavailable or
	// to get a new pod beside the old one in this pass.
	budget, surge int
	// halted: the failure threshold halted this revision; no device
	// moves to it.
	halted bool
}

// syncDaemonSet is one DaemonSet's reconcile: a pod of the current
// template on every device that should run one; none where it must not
// continue; older pods replaced by the update strategy — OnDelete only
// when deleted, RollingUpdate at most maxUnavailable devices at a time
// (not-ready old pods first), or with maxSurge the new pod beside the old
// until it is available. A new pod waits for the device's terminating one.
func (k *controllers) syncDaemonSet(ds *appsv1.DaemonSet, hash string, probe *v1.Pod, affinity nodeaffinity.RequiredNodeAffinity) {
	nodes := k.daemonNodes(ds, hash, probe, affinity)
	if len(nodes) > 0 && !slices.ContainsFunc(nodes, func(dn *daemonNode) bool { return dn.run || dn.keep }) {
		k.c.Event(Event{Kind: "DaemonSet", Namespace: ds.Namespace, Name: ds.Name,
			Type: v1.EventTypeWarning, Reason: "NoMatchingDevices",
			Message: fmt.Sprintf("0/%d devices match the DaemonSet's nodeSelector, affinity and tolerations", len(nodes))})
	}
	r := &daemonRollout{ds: ds, hash: hash, minReady: ds.Spec.MinReadySeconds,
		outdated: fmt.Sprintf("DaemonSet %s has a new template", ds.Name),
		onDelete: ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType}
	// The budget counts the devices the DaemonSet should run on now, as
	// the controller's updatedDesiredNodeCounts does: an unreachable
	// device (tainted NoSchedule) is not one of them, so a dead device
	// never holds back the rest; it is skipped, its pod left alone, and
	// updated within the budget once it returns.
	desired, unavailable := 0, 0
	for _, dn := range nodes {
		if !dn.run {
			continue
		}
		desired++
		for _, p := range append(slices.Clone(dn.current), dn.old...) {
			dn.hasAvailable = dn.hasAvailable || k.available(p, r.minReady)
		}
		if !dn.hasAvailable {
			unavailable++
		}
	}
	var maxUnavailable, maxSurge *intstr.IntOrString
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru != nil {
		maxUnavailable, maxSurge = ru.MaxUnavailable, ru.MaxSurge
	} else {
		one := intstr.FromInt32(1)
		maxUnavailable = &one
	}
	r.budget = scaled(maxUnavailable, desired, true) - unavailable
	r.surge = scaled(maxSurge, desired, true) - countSurging(nodes)
	r.surging = scaled(maxSurge, desired, true) > 0
	book := newRevisionBook(k.revisions[Index("DaemonSet", ds.Namespace, ds.Name)], k.c.Owned(Index("DaemonSet", ds.Namespace, ds.Name)),
		func(p Pod) string { return p.Pod.Labels[LabelControllerHash] })
	cur, _ := book.makeCurrent(hash, &ds.Spec.Template, ds.Annotations[AnnotationChangeCause])
	r.halted = k.daemonHalt(ds, cur, nodes, book)
	for _, dn := range nodes {
		k.updateDaemonNode(r, dn)
	}
	k.finishDaemonSet(ds, hash, nodes, book)
}

// daemonHalt checks the failure threshold over the devices already
// updated (unreachable ones say nothing) while old pods remain.
func (k *controllers) daemonHalt(ds *appsv1.DaemonSet, cur *Revision, nodes []*daemonNode, book *revisionBook) bool {
	if cur.Halted != "" {
		return true
	}
	var updated []Pod
	rolling := false
	for _, dn := range nodes {
		rolling = rolling || len(dn.old) > 0
		if !unreachable(dn.n) {
			updated = append(updated, dn.current...)
		}
	}
	if !rolling || !hasThreshold(ds.Annotations) {
		return false
	}
	v := k.verdicts(updated, ds.Spec.MinReadySeconds, daemonVerdictDeadline, nil)
	msg := halts(ds.Annotations, v, fmt.Sprintf("ControllerRevision %q", ds.Name+"-"+cur.Hash))
	if msg == "" {
		return false
	}
	cur.Halted, book.changed = msg, true
	k.haltEvent("DaemonSet", ds.Namespace, ds.Name, msg)
	return true
}

// daemonVerdictDeadline is how long a DaemonSet's new pod has to become
// available before it counts as failed (a DaemonSet has no
// progressDeadlineSeconds: a Deployment's default).
const daemonVerdictDeadline = 600 * time.Second

// unreachable reports whether a device carries the unreachable taint.
func unreachable(n Node) bool {
	for _, t := range n.Node.Spec.Taints {
		if t.Key == v1.TaintNodeUnreachable {
			return true
		}
	}
	return false
}

// daemonNodes sorts a DaemonSet's pods by device, deleting those on
// devices gone or no longer eligible.
func (k *controllers) daemonNodes(ds *appsv1.DaemonSet, hash string, probe *v1.Pod, affinity nodeaffinity.RequiredNodeAffinity) []*daemonNode {
	byNode := map[string]*daemonNode{}
	var nodes []*daemonNode
	for _, n := range k.c.Nodes() {
		run, keep := daemonShouldRun(probe, affinity, n)
		dn := &daemonNode{n: n, run: run, keep: keep}
		byNode[n.Name] = dn
		nodes = append(nodes, dn)
	}
	for _, p := range k.c.Owned(Index("DaemonSet", ds.Namespace, ds.Name)) {
		node := p.Pod.Spec.NodeName
		if node == "" {
			if pins := PinnedNodes(p.Pod); len(pins) == 1 {
				node = pins[0]
			}
		}
		dn := byNode[node]
		switch {
		case dn == nil:
			k.c.Delete(p.Key, ReasonNotEligible, fmt.Sprintf("device %q is gone", node))
		case p.Terminating:
			dn.terminating = true
		case !dn.keep:
			k.c.Delete(p.Key, ReasonNotEligible, fmt.Sprintf("device %s no longer matches DaemonSet %s", node, ds.Name))
			dn.terminating = true
		case p.Pod.Labels[LabelControllerHash] != hash:
			dn.old = append(dn.old, p)
		default:
			dn.current = append(dn.current, p)
		}
	}
	return nodes
}

// updateDaemonNode leaves one pod of the DaemonSet on a device: the
// current template's, the old one's replaced within the budget, or a new
// one where none runs.
func (k *controllers) updateDaemonNode(r *daemonRollout, dn *daemonNode) {
	ds, outdated := r.ds, r.outdated
	extraMessage := func() string {
		return fmt.Sprintf("more than one pod of DaemonSet %s on device %s", ds.Name, dn.n.Name)
	}
	slices.SortStableFunc(dn.current, func(a, b Pod) int { return a.Created.Compare(b.Created) })
	for _, extra := range dn.current[min(1, len(dn.current)):] {
		k.c.Delete(extra.Key, ReasonScaledDown, extraMessage())
	}
	switch {
	case r.halted && len(dn.current) == 0:
		// Halted: a device keeps what it runs; none gets the revision.
	case len(dn.current) > 0:
		// The new pod is there: the old go once it is available (at
		// once without surge, where they should not coexist).
		if len(dn.old) > 0 && !r.halted && (!r.surging || k.available(dn.current[0], r.minReady)) {
			for _, p := range dn.old {
				if !r.surging || k.mayDisrupt(p) {
					k.c.Delete(p.Key, ReasonOutdated, outdated)
				}
			}
		}
	case len(dn.old) > 0:
		for _, extra := range dn.old[1:] {
			k.c.Delete(extra.Key, ReasonScaledDown, extraMessage())
		}
		switch {
		case r.onDelete:
		case unreachable(dn.n):
			// Skipped while unreachable: its pod may well run on, and a
			// deletion it cannot hear would take it down, unbudgeted, the
			// moment it returns. Back, it is updated within the budget.
		case r.surging:
			if r.surge > 0 && dn.run {
				k.createDaemonPod(ds, r.hash, dn.n.Name)
				r.surge--
			}
		case !dn.old[0].Observed.Reported:
			// Not reported (yet) is not unavailable: it costs the budget.
			if r.budget > 0 && k.mayDisrupt(dn.old[0]) {
				k.c.Delete(dn.old[0].Key, ReasonOutdated, outdated)
				r.budget--
			}
		case !k.available(dn.old[0], r.minReady):
			if k.mayDisrupt(dn.old[0]) {
				k.c.Delete(dn.old[0].Key, ReasonOutdated, outdated)
			}
		case r.budget > 0 && k.mayDisrupt(dn.old[0]):
			k.c.Delete(dn.old[0].Key, ReasonOutdated, outdated)
			r.budget--
		}
	case dn.run && !dn.terminating:
		k.createDaemonPod(ds, r.hash, dn.n.Name)
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
