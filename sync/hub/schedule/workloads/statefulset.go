package workloads

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Labels a StatefulSet's pods carry besides controller-revision-hash.
const (
	LabelStatefulSetPodName = appsv1.StatefulSetPodNameLabel // statefulset.kubernetes.io/pod-name
	LabelPodIndex           = appsv1.PodIndexLabel           // apps.kubernetes.io/pod-index
)

// runStatefulSets is the StatefulSet controller (pkg/controller/statefulset,
// updateStatefulSet): pods named NAME-ORDINAL, made and deleted in
// ordinal order (OrderedReady) or all at once (Parallel), updated from
// the highest ordinal down to the partition.
//
// At most once: a pod of an identity is made only when no pod of that
// name is on the books. A deleted pod stays there, terminating, until its
// device confirms it stopped, or the hub knows it cannot run (its device
// fenced, its self-fencing lease run out: forceDeleteUnreachable), so a
// StatefulSet never has two copies of one pod, even when a device is cut
// off — unlike a Deployment, whose replacement has a new name.
func (k *controllers) runStatefulSets(sets []*appsv1.StatefulSet) {
	for _, s := range sortedByName(sets) {
		k.syncStatefulSet(s)
	}
}

// revision is a StatefulSet's template as its pods carry it: the
// controller-revision-hash label's value (NAME-HASH, the ControllerRevision's
// name) and the template it stands for.
type revision struct {
	Name     string
	Template *v1.PodTemplateSpec
}

// updateRevision is the revision of the StatefulSet's template.
func updateRevision(s *appsv1.StatefulSet) revision {
	return revision{Name: s.Name + "-" + TemplateHash(&s.Spec.Template), Template: &s.Spec.Template}
}

// ordinal is the ordinal of a pod named PARENT-N, or -1 when its name has
// no such form (the controller ignores those pods).
func ordinal(set, pod string) int {
	rest, ok := strings.CutPrefix(pod, set+"-")
	if !ok || rest == "" || (len(rest) > 1 && rest[0] == '0') {
		return -1
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n < 0 || strconv.Itoa(n) != rest {
		return -1
	}
	return n
}

// statefulSetPods is one StatefulSet's pods in one pass.
type statefulSetPods struct {
	set              *appsv1.StatefulSet
	current, update  revision
	start, minReady  int32
	replicas         []*Pod // by ordinal - start; nil while not made
	condemned        []*Pod // ordinals out of range, highest first
	firstUnavailable *Pod
}

// replicaCount is spec.replicas, 1 when unset.
func replicaCount(s *appsv1.StatefulSet) int {
	if s.Spec.Replicas == nil {
		return 1
	}
	return int(max(*s.Spec.Replicas, 0))
}

func startordinal(s *appsv1.StatefulSet) int32 {
	if s.Spec.Ordinals != nil {
		return max(s.Spec.Ordinals.Start, 0)
	}
	return 0
}

// sortStatefulSetPods files a StatefulSet's pods by ordinal, with the
// revisions its sync works with (statefulRevisions).
func sortStatefulSetPods(s *appsv1.StatefulSet, owned []Pod, current, update revision, k *controllers) *statefulSetPods {
	n := replicaCount(s)
	sp := &statefulSetPods{set: s, current: current, update: update, start: startordinal(s),
		minReady: s.Spec.MinReadySeconds, replicas: make([]*Pod, n)}
	for i := range owned {
		p := &owned[i]
		ord := ordinal(s.Name, p.Key.Name)
		if ord < 0 {
			continue
		}
		if idx := ord - int(sp.start); idx >= 0 && idx < n {
			if sp.replicas[idx] != nil {
				continue // one pod per name: the books hold no two
			}
			sp.replicas[idx] = p
		} else {
			sp.condemned = append(sp.condemned, p)
		}
	}
	slices.SortFunc(sp.condemned, func(a, b *Pod) int {
		return cmp.Compare(ordinal(s.Name, b.Key.Name), ordinal(s.Name, a.Key.Name))
	})
	for _, p := range sp.replicas {
		if p != nil && k.unavailable(*p, sp.minReady) {
			if sp.firstUnavailable == nil {
				sp.firstUnavailable = p
			}
		}
	}
	for i := len(sp.condemned) - 1; i >= 0; i-- {
		if p := sp.condemned[i]; k.unavailable(*p, sp.minReady) {
			if sp.firstUnavailable == nil {
				sp.firstUnavailable = p
			}
		}
	}
	return sp
}

// currentFromPods is the current revision of a StatefulSet whose status
// was never stored (made before the hub kept it): the revision its
// lowest outdated live pod carries (else a terminating one's), or the
// update revision when none is outdated.
func currentFromPods(s *appsv1.StatefulSet, owned []Pod, update revision) revision {
	var outdated *Pod
	for i := range owned {
		p := &owned[i]
		ord := ordinal(s.Name, p.Key.Name)
		if rev := p.Pod.Labels[LabelControllerHash]; ord >= 0 && rev != update.Name && rev != "" &&
			(outdated == nil || outdated.Terminating && !p.Terminating ||
				outdated.Terminating == p.Terminating && ord < ordinal(s.Name, outdated.Key.Name)) {
			outdated = p
		}
	}
	if outdated == nil {
		return update
	}
	return revision{Name: outdated.Pod.Labels[LabelControllerHash], Template: templateOf(outdated.Pod)}
}

// templateOf is the template a StatefulSet pod was made from: its labels
// without the controller's, its annotations and spec without its
// placement and identity.
func templateOf(p *v1.Pod) *v1.PodTemplateSpec {
	t := &v1.PodTemplateSpec{Spec: *p.Spec.DeepCopy()}
	t.Annotations = p.Annotations
	t.Labels = map[string]string{}
	for k, v := range p.Labels {
		if k != LabelControllerHash && k != LabelStatefulSetPodName && k != LabelPodIndex {
			t.Labels[k] = v
		}
	}
	t.Spec.NodeName, t.Spec.Hostname, t.Spec.Subdomain = "", "", ""
	return t
}

// isRunningAndReady and isRunningAndAvailable read the device's report.
func runningAndReady(p Pod) bool {
	return p.Observed.Phase == v1.PodRunning && p.Observed.Ready
}

func (k *controllers) runningAndAvailable(p Pod, minReady int32) bool {
	return p.Observed.Phase == v1.PodRunning && k.available(p, minReady)
}

// unavailable is isUnavailable: not running and available, or terminating.
func (k *controllers) unavailable(p Pod, minReady int32) bool {
	return !k.runningAndAvailable(p, minReady) || p.Terminating
}

// syncStatefulSet is one StatefulSet's updateStatefulSet: its revisions,
// replicas first (in order, each waiting for its predecessors to be
// Running and Ready under OrderedReady), then the condemned pods from the
// highest ordinal, then the rolling update (unless the failure threshold
// halted it); then its status and revision history.
func (k *controllers) syncStatefulSet(s *appsv1.StatefulSet) {
	owned := k.c.Owned(Index("StatefulSet", s.Namespace, s.Name))
	book, current, update := k.statefulRevisions(s, owned)
	sp := sortStatefulSetPods(s, owned, current, update, k)
	halted := k.statefulHalt(sp, book)
	k.updateStatefulSet(sp, halted != "")
	k.finishStatefulSet(s, current, update, book, halted)
}

// updateStatefulSet makes, deletes and updates the pods of one pass.
func (k *controllers) updateStatefulSet(sp *statefulSetPods, halted bool) {
	s := sp.set
	monotonic := s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement
	for i := range sp.replicas {
		if k.processReplica(sp, i, monotonic) && monotonic {
			return
		}
	}
	for _, p := range sp.condemned {
		if k.processCondemned(sp, p, monotonic) && monotonic {
			return
		}
	}
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType || halted {
		return
	}
	k.rollStatefulSet(sp)
}

// processReplica is the controller's processReplica for ordinal start+i;
// it reports whether a monotonic set must stop there this pass.
func (k *controllers) processReplica(sp *statefulSetPods, i int, monotonic bool) bool {
	p := sp.replicas[i]
	ord := int(sp.start) + i
	if p == nil {
		return k.createStatefulPod(sp, ord)
	}
	// A pod that finished (Failed, or Succeeded as a forcibly stopped pod
	// may) is deleted; its successor comes once it is gone.
	if ph := p.Observed.Phase; ph == v1.PodFailed || ph == v1.PodSucceeded {
		if !p.Terminating {
			k.deleteStatefulPod(sp.set, p, fmt.Sprintf("StatefulSet %s recreates pod %s, which is %s", sp.set.Name, p.Key.Name, ph))
		}
		return true
	}
	if p.Terminating || !k.runningAndAvailable(*p, sp.minReady) { // available implies Ready
		return true // monotonic: wait for it
	}
	return false
}

// createStatefulPod makes the pod of an ordinal, unless its name is taken
// (a pod of another owner, or one this pass forgot): the StatefulSet
// waits. It reports whether a monotonic set must stop.
func (k *controllers) createStatefulPod(sp *statefulSetPods, ord int) bool {
	s := sp.set
	key := types.NamespacedName{Namespace: s.Namespace, Name: fmt.Sprintf("%s-%d", s.Name, ord)}
	if k.c.Taken(key) {
		// A pod of that name the set does not own (a bare pod, or one of
		// a set deleted and applied again, terminating): the API server
		// would refuse the create.
		k.c.Event(Event{Kind: "StatefulSet", Namespace: s.Namespace, Name: s.Name, Type: v1.EventTypeWarning, Reason: "FailedCreate",
			Message: fmt.Sprintf("create Pod %s in StatefulSet %s failed error: pods %q already exists", key.Name, s.Name, key.Name)})
		return true
	}
	rev := sp.update
	if sp.current.Template != nil && atCurrentRevision(s, ord) {
		rev = sp.current
	}
	p := k.newPod(s.ObjectMeta, rev.Template, map[string]string{
		LabelControllerHash:     rev.Name,
		LabelStatefulSetPodName: key.Name,
		LabelPodIndex:           strconv.Itoa(ord),
	}, controllerRef("StatefulSet", s.Name, s.UID))
	p.Name = key.Name
	p.Spec.NodeName = ""
	p.Spec.Hostname = key.Name
	p.Spec.Subdomain = s.Spec.ServiceName
	before := k.c.Count()
	k.create(p, "StatefulSet", s.ObjectMeta)
	if k.c.Count() > before {
		k.c.Event(Event{Kind: "StatefulSet", Namespace: s.Namespace, Name: s.Name, Type: v1.EventTypeNormal,
			Reason: "SuccessfulCreate", Message: fmt.Sprintf("create Pod %s in StatefulSet %s successful", key.Name, s.Name)})
	}
	return true
}

func (k *controllers) deleteStatefulPod(s *appsv1.StatefulSet, p *Pod, why string) {
	k.c.Delete(p.Key, ReasonStatefulSet, why)
	p.Terminating = true
	k.c.Event(Event{Kind: "StatefulSet", Namespace: s.Namespace, Name: s.Name, Type: v1.EventTypeNormal,
		Reason: "SuccessfulDelete", Message: fmt.Sprintf("delete Pod %s in StatefulSet %s successful", p.Key.Name, s.Name)})
}

// processCondemned scales down one pod beyond the replicas: in monotonic
// mode only once it terminated its successor, and only if it is Running
// and Ready or the first unavailable pod. It reports whether a monotonic
// set must stop.
func (k *controllers) processCondemned(sp *statefulSetPods, p *Pod, monotonic bool) bool {
	if p.Terminating {
		return true
	}
	if monotonic && p != sp.firstUnavailable && !k.runningAndAvailable(*p, sp.minReady) {
		return true
	}
	k.deleteStatefulPod(sp.set, p, fmt.Sprintf("StatefulSet %s scaled to %d", sp.set.Name, replicaCount(sp.set)))
	return true
}

// rollStatefulSet is the RollingUpdate: from the highest ordinal down to
// the partition, delete the outdated pod and wait until its successor is
// available before the next — or, with maxUnavailable, delete outdated
// pods while fewer than that many replicas are unavailable (the
// MaxUnavailableStatefulSet path, which the hub always takes when
// maxUnavailable is set).
func (k *controllers) rollStatefulSet(sp *statefulSetPods) {
	s := sp.set
	updateMin := partition(s)
	ru := s.Spec.UpdateStrategy.RollingUpdate
	why := fmt.Sprintf("StatefulSet %s has a new template (revision %s)", s.Name, sp.update.Name)
	outdated := func(p *Pod) bool { return p.Pod.Labels[LabelControllerHash] != sp.update.Name && !p.Terminating }
	if ru != nil && ru.MaxUnavailable != nil {
		most, err := intstr.GetScaledValueFromIntOrPercent(ru.MaxUnavailable, len(sp.replicas), false)
		if err != nil || most < 1 {
			most = 1
		}
		// An outdated pod already unavailable goes first, at no cost:
		// Kubernetes keeps it against the budget, so that a rollout undone
		// after its new pods failed waits for an operator to delete them
		// (its "forced rollback"); the hub's halts are meant to be undone.
		for t := len(sp.replicas) - 1; t >= updateMin; t-- {
			if p := sp.replicas[t]; p != nil && outdated(p) && k.unavailable(*p, sp.minReady) && k.mayDisrupt(*p) {
				k.deleteStatefulPod(s, p, why)
			}
		}
		// isUnavailable over the replicas now: a pod made or deleted this
		// pass counts.
		budget := most
		for _, p := range sp.replicas {
			if p == nil || k.unavailable(*p, sp.minReady) {
				budget--
			}
		}
		for t := len(sp.replicas) - 1; t >= updateMin && budget > 0; t-- {
			if p := sp.replicas[t]; p != nil && outdated(p) && k.mayDisrupt(*p) {
				k.deleteStatefulPod(s, p, why)
				budget--
			}
		}
		return
	}
	for t := len(sp.replicas) - 1; t >= updateMin; t-- {
		p := sp.replicas[t]
		if p == nil {
			return // made this pass: not available yet
		}
		if outdated(p) {
			if k.mayDisrupt(*p) { // else the pod's budget holds the rollout
				k.deleteStatefulPod(s, p, why)
			}
			return
		}
		if k.unavailable(*p, sp.minReady) {
			return
		}
	}
}
