package schedule

import (
	"cmp"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
)

// Labels the workload controllers put on their pods.
const (
	LabelPodTemplateHash    = appsv1.DefaultDeploymentUniqueLabelKey // pod-template-hash
	LabelControllerHash     = appsv1.ControllerRevisionHashLabelKey  // controller-revision-hash
	LabelTemplateGeneration = appsv1.DeprecatedTemplateGeneration    // pod-template-generation
)

// TemplateHash is a pod template's hash as a label value, the name part
// a Deployment's ReplicaSet and pods carry.
func TemplateHash(t *v1.PodTemplateSpec) string {
	h := fnv.New32a()
	b, _ := json.Marshal(t) // a decoded template always marshals
	h.Write(b)
	return utilrand.SafeEncodeString(strconv.FormatUint(uint64(h.Sum32()), 10))
}

// controllerOf is the pod's controller owner reference, or nil.
func controllerOf(p *v1.Pod) *metav1.OwnerReference {
	return metav1.GetControllerOfNoCopy(p)
}

// workloadIndex keys state.owned.
func workloadIndex(kind, namespace, name string) string {
	return kind + "/" + namespace + "/" + name
}

// ownerIndex is the workload a pod's controller reference names: its
// DaemonSet, or the Deployment of its ReplicaSet (named after the
// Deployment and the pod's template hash); "" for none.
func ownerIndex(p *v1.Pod) string {
	ref := controllerOf(p)
	if ref == nil {
		return ""
	}
	switch ref.Kind {
	case "DaemonSet":
		return workloadIndex("DaemonSet", p.Namespace, ref.Name)
	case "ReplicaSet":
		if d, ok := strings.CutSuffix(ref.Name, "-"+p.Labels[LabelPodTemplateHash]); ok {
			return workloadIndex("Deployment", p.Namespace, d)
		}
	}
	return ""
}

// ownerKey is ownerIndex for a pod of the live workload of that name: a
// pod whose controller reference carries another UID belongs to a
// workload deleted and applied again, which the garbage collector
// deletes (as it does when a new object takes an old one's name) and
// the new workload never adopts. A reference or workload without a UID
// matches by name.
func (s *state) ownerKey(p *v1.Pod) string {
	k := ownerIndex(p)
	if k == "" {
		return ""
	}
	ref := controllerOf(p)
	uid, live := s.daemonSetUIDs[k]
	if d := s.deploymentOf[k]; d != nil {
		uid, live = d.UID, true
	}
	if !live || ref.UID == "" || uid == "" {
		return k
	}
	want := uid
	if ref.Kind == "ReplicaSet" {
		want = replicaSetUID(uid, p.Labels[LabelPodTemplateHash])
	}
	if ref.UID != want {
		return ""
	}
	return k
}

// replicaSetUID is the UID a Deployment's ReplicaSet of one template
// hash carries in its pods' controller references.
func replicaSetUID(deployment types.UID, hash string) types.UID {
	return types.UID(string(deployment) + "-" + hash)
}

// index files a pod under its workload.
func (s *state) index(p *podInfo) {
	if k := s.ownerKey(p.pod); k != "" {
		s.owned[k] = append(s.owned[k], p)
	}
}

// podsOf are the pods a Deployment controls, in pass order.
func (s *state) podsOf(d *appsv1.Deployment) []*podInfo {
	return s.owned[workloadIndex("Deployment", d.Namespace, d.Name)]
}

// daemonPods are the pods a DaemonSet controls, in pass order.
func (s *state) daemonPods(ds *appsv1.DaemonSet) []*podInfo {
	return s.owned[workloadIndex("DaemonSet", ds.Namespace, ds.Name)]
}

// ownedBy reports whether a Deployment controls a pod (through the
// ReplicaSet named after it and the pod's template hash).
func ownedBy(d *appsv1.Deployment, p *v1.Pod) bool {
	ref := controllerOf(p)
	return ref != nil && ref.Kind == "ReplicaSet" && p.Namespace == d.Namespace &&
		ref.Name == d.Name+"-"+p.Labels[LabelPodTemplateHash]
}

// maxGeneratedNameLength is the API server's limit on generateName's prefix.
const maxGeneratedNameLength = 63 - 5

// podName is generateName's name for a new pod, made deterministic: the
// prefix and five characters of the API server's alphabet drawn from a
// hash of the seed, skipping names already taken in the namespace.
func (s *state) podName(namespace, prefix, seed string) string {
	for i := 0; ; i++ {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s/%s/%d", prefix, seed, i)
		enc := utilrand.SafeEncodeString(strconv.FormatUint(h.Sum64(), 10))
		// generateName keeps the name within 63 characters.
		name := prefix[:min(len(prefix), maxGeneratedNameLength)] + enc[len(enc)-5:]
		if _, taken := s.pods[types.NamespacedName{Namespace: namespace, Name: name}]; !taken {
			return name
		}
	}
}

// newPod is a pod from a workload's template, admitted as the API server
// would; an admission refusal becomes the pod's pending reason.
func (s *state) newPod(meta metav1.ObjectMeta, t *v1.PodTemplateSpec, extra map[string]string, owner metav1.OwnerReference) *v1.Pod {
	p := &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Namespace:         meta.Namespace,
			Labels:            map[string]string{},
			Annotations:       t.Annotations,
			OwnerReferences:   []metav1.OwnerReference{owner},
			CreationTimestamp: metav1.NewTime(s.now),
		},
		Spec: *t.Spec.DeepCopy(),
	}
	for k, v := range t.Labels {
		p.Labels[k] = v
	}
	for k, v := range extra {
		p.Labels[k] = v
	}
	return p
}

func controllerRef(kind, name string, uid types.UID) metav1.OwnerReference {
	yes := true
	return metav1.OwnerReference{APIVersion: "apps/v1", Kind: kind, Name: name, UID: uid, Controller: &yes, BlockOwnerDeletion: &yes}
}

// runDaemonSets is the DaemonSet controller: one pod on every device the
// template's nodeSelector, required affinity and taints (with the daemon
// tolerations) admit; none where a NoExecute taint or a selector says no.
func (s *state) runDaemonSets(dss []*appsv1.DaemonSet) {
	dss = slices.Clone(dss)
	slices.SortFunc(dss, func(a, b *appsv1.DaemonSet) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, ds := range dss {
		hash := TemplateHash(&ds.Spec.Template)
		probe := &v1.Pod{Spec: *ds.Spec.Template.Spec.DeepCopy()}
		probe.Labels = ds.Spec.Template.Labels
		addDaemonTolerations(probe)
		affinity := nodeaffinity.GetRequiredNodeAffinity(probe)
		s.syncDaemonSet(ds, hash, probe, affinity)
	}
}

// daemonShouldRun is NodeShouldRunDaemonPod: run where the selector,
// required affinity and every NoSchedule/NoExecute taint allow; keep an
// existing pod unless a selector fails or a NoExecute taint is untolerated.
func daemonShouldRun(probe *v1.Pod, affinity nodeaffinity.RequiredNodeAffinity, n *nodeInfo) (run, keep bool) {
	if name := probe.Spec.NodeName; name != "" && name != n.name {
		return false, false
	}
	if ok, _ := affinity.Match(n.node); !ok {
		return false, false
	}
	if _, bad := untoleratedTaint(n.node.Spec.Taints, probe.Spec.Tolerations); bad {
		_, badNoExec := findUntolerated(n.node.Spec.Taints, probe.Spec.Tolerations, v1.TaintEffectNoExecute)
		return false, !badNoExec
	}
	return true, true
}

func findUntolerated(taints []v1.Taint, tolerations []v1.Toleration, effect v1.TaintEffect) (v1.Taint, bool) {
	for i := range taints {
		if taints[i].Effect != effect {
			continue
		}
		tolerated := false
		for _, t := range tolerations {
			if t.ToleratesTaint(quiet, &taints[i], false) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return taints[i], true
		}
	}
	return v1.Taint{}, false
}

func (s *state) createDaemonPod(ds *appsv1.DaemonSet, hash string, n *nodeInfo) {
	p := s.newPod(ds.ObjectMeta, &ds.Spec.Template, map[string]string{
		LabelControllerHash:     hash,
		LabelTemplateGeneration: strconv.FormatInt(ds.Generation, 10),
	}, controllerRef("DaemonSet", ds.Name, ds.UID))
	p.Name = s.podName(p.Namespace, ds.Name+"-", n.name)
	p.Spec.NodeName = ""
	addDaemonTolerations(p)
	p.Spec.Affinity = pinToNode(p.Spec.Affinity, n.name)
	s.admitCreated(p, "DaemonSet", ds.ObjectMeta)
}

// admitCreated admits a controller's new pod and queues it, or records
// the API server's refusal as a FailedCreate event on the workload.
func (s *state) admitCreated(p *v1.Pod, kind string, owner metav1.ObjectMeta) {
	key := types.NamespacedName{Namespace: owner.Namespace, Name: kind + "/" + owner.Name}
	if s.overQuota[key] {
		return // refused once this pass: one event says so
	}
	err := s.admit(p)
	if err == nil && s.maxPods > 0 && len(s.pods) >= s.maxPods {
		s.overQuota[key] = true
		err = fmt.Errorf("pods %q is forbidden: exceeded quota: podhub, requested: pods=1, used: pods=%d, limited: pods=%d",
			p.Name, len(s.pods), s.maxPods)
	}
	if err != nil {
		s.plan.Events = append(s.plan.Events, Event{Kind: kind, Namespace: owner.Namespace, Name: owner.Name,
			Type: v1.EventTypeWarning, Reason: "FailedCreate", Message: "Error creating: " + err.Error()})
		return
	}
	s.addCreated(p)
}

// pinToNode is ReplaceDaemonSetPodNodeNameNodeAffinity: the required
// terms become one matchFields metadata.name In [device].
func pinToNode(a *v1.Affinity, node string) *v1.Affinity {
	sel := &v1.NodeSelector{NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchFields: []v1.NodeSelectorRequirement{
		{Key: metav1.ObjectNameField, Operator: v1.NodeSelectorOpIn, Values: []string{node}}}}}}
	if a == nil {
		a = &v1.Affinity{}
	}
	if a.NodeAffinity == nil {
		a.NodeAffinity = &v1.NodeAffinity{}
	}
	a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = sel
	return a
}

// runDeployments is the Deployment and ReplicaSet controllers: replicas
// created or deleted to the count, a new template rolled out by the
// Deployment's strategy (rollout.go).
func (s *state) runDeployments(ds []*appsv1.Deployment) {
	ds = slices.Clone(ds)
	slices.SortFunc(ds, func(a, b *appsv1.Deployment) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	for _, d := range ds {
		s.syncDeployment(d)
	}
}

// deletionOrder is the ReplicaSet controller's choice of pods to delete
// first: unplaced, then not running, not ready, on a device with more of
// its siblings, newer; then by name.
func deletionOrder(pods []*podInfo) func(a, b *podInfo) int {
	onNode := map[*nodeInfo]int{}
	for _, p := range pods {
		if p.node != nil {
			onNode[p.node]++
		}
	}
	phaseRank := func(p *podInfo) int {
		switch p.pod.Status.Phase {
		case v1.PodPending, "":
			return 0
		case v1.PodUnknown:
			return 1
		}
		return 2
	}
	ready := func(p *podInfo) int {
		for _, c := range p.pod.Status.Conditions {
			if c.Type == v1.PodReady && c.Status == v1.ConditionTrue {
				return 1
			}
		}
		return 0
	}
	placed := func(p *podInfo) int {
		if p.node != nil {
			return 1
		}
		return 0
	}
	return func(a, b *podInfo) int {
		return cmp.Or(
			cmp.Compare(placed(a), placed(b)),
			cmp.Compare(phaseRank(a), phaseRank(b)),
			cmp.Compare(ready(a), ready(b)),
			cmp.Compare(onNode[b.node], onNode[a.node]),
			b.created.Compare(a.created),
			cmp.Compare(a.key.Name, b.key.Name),
		)
	}
}

// deleteOrphans deletes pods whose controlling workload is gone, as the
// garbage collector does.
func (s *state) deleteOrphans(dss []*appsv1.DaemonSet, ds []*appsv1.Deployment) {
	live := make(map[string]bool, len(dss)+len(ds))
	for _, d := range dss {
		live[workloadIndex("DaemonSet", d.Namespace, d.Name)] = true
	}
	for _, d := range ds {
		live[workloadIndex("Deployment", d.Namespace, d.Name)] = true
	}
	for _, p := range s.order {
		ref := controllerOf(p.pod)
		if p.terminating || ref == nil {
			continue
		}
		found := true
		if ref.Kind == "DaemonSet" || ref.Kind == "ReplicaSet" {
			found = live[s.ownerKey(p.pod)]
		}
		if !found {
			s.markDeleted(p, ReasonOwnerDeleted, fmt.Sprintf("%s %s was deleted", ref.Kind, ref.Name))
		}
	}
}

// defaultSelector is the selector the system default spread uses for a
// pod: its ReplicaSet's (the Deployment's selector and the pod's template
// hash); nil for pods no ReplicaSet selects (DaemonSet and bare pods, as
// helper.DefaultSelector finds no Service here).
func (s *state) defaultSelector(p *v1.Pod) labels.Selector {
	if d := s.deploymentOf[s.ownerKey(p)]; d != nil && ownedBy(d, p) {
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil || sel.Empty() {
			return nil
		}
		if r, err := labels.NewRequirement(LabelPodTemplateHash, selection.Equals, []string{p.Labels[LabelPodTemplateHash]}); err == nil {
			sel = sel.Add(*r)
		}
		return sel
	}
	return nil
}
