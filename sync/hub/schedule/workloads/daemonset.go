package workloads

import (
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/podvisor/podvisor/sync/hub/schedule/fleet"
)

// runDaemonSets is the DaemonSet controller: one pod on every device the
// template's nodeSelector, required affinity and taints (with the daemon
// tolerations) admit; none where a NoExecute taint or a selector says no.
func (k *controllers) runDaemonSets(dss []*appsv1.DaemonSet) {
	for _, ds := range sortedByName(dss) {
		hash := TemplateHash(&ds.Spec.Template)
		probe := &v1.Pod{Spec: *ds.Spec.Template.Spec.DeepCopy()}
		probe.Labels = ds.Spec.Template.Labels
		addDaemonTolerations(probe)
		affinity := nodeaffinity.GetRequiredNodeAffinity(probe)
		k.syncDaemonSet(ds, hash, probe, affinity)
	}
}

// daemonShouldRun is NodeShouldRunDaemonPod: run where the selector,
// required affinity and every NoSchedule/NoExecute taint allow; keep an
// existing pod unless a selector fails or a NoExecute taint is untolerated.
func daemonShouldRun(probe *v1.Pod, affinity nodeaffinity.RequiredNodeAffinity, n Node) (run, keep bool) {
	if name := probe.Spec.NodeName; name != "" && name != n.Name {
		return false, false
	}
	if ok, _ := affinity.Match(n.Node); !ok {
		return false, false
	}
	if _, bad := fleet.UntoleratedTaint(n.Node.Spec.Taints, probe.Spec.Tolerations); bad {
		_, badNoExec := findUntolerated(n.Node.Spec.Taints, probe.Spec.Tolerations, v1.TaintEffectNoExecute)
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

func (k *controllers) createDaemonPod(ds *appsv1.DaemonSet, hash string, node string) {
	p := k.newPod(ds.ObjectMeta, &ds.Spec.Template, map[string]string{
		LabelControllerHash:     hash,
		LabelTemplateGeneration: strconv.FormatInt(ds.Generation, 10),
	}, controllerRef("DaemonSet", ds.Name, ds.UID))
	p.Name = k.podName(p.Namespace, ds.Name+"-", node)
	p.Spec.NodeName = ""
	addDaemonTolerations(p)
	p.Spec.Affinity = pinToNode(p.Spec.Affinity, node)
	k.create(p, "DaemonSet", ds.ObjectMeta)
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

// PinnedNodes returns the node names every required term restricts the
// pod to with matchFields metadata.name In (as the DaemonSet controller
// writes), or nil when some term does not.
func PinnedNodes(p *v1.Pod) []string {
	a := p.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return nil
	}
	var names []string
	for _, t := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		found := false
		for _, r := range t.MatchFields {
			if r.Key == metav1.ObjectNameField && r.Operator == v1.NodeSelectorOpIn {
				names = append(names, r.Values...)
				found = true
				break
			}
		}
		if !found {
			return nil
		}
	}
	if names == nil {
		return []string{}
	}
	return names
}

// addDaemonTolerations adds what the DaemonSet controller gives its pods
// (util.AddOrUpdateDaemonPodTolerations): they stay on not-ready,
// unreachable, pressured and cordoned devices, with no time limit.
func addDaemonTolerations(p *v1.Pod) {
	add := func(key string, effect v1.TaintEffect) {
		for _, t := range p.Spec.Tolerations {
			if t.Key == key && t.Effect == effect && t.Operator == v1.TolerationOpExists && t.TolerationSeconds == nil {
				return
			}
		}
		// The controller replaces a toleration for the same key and effect.
		kept := p.Spec.Tolerations[:0:0]
		for _, t := range p.Spec.Tolerations {
			if !(t.Key == key && t.Effect == effect) {
				kept = append(kept, t)
			}
		}
		p.Spec.Tolerations = append(kept, v1.Toleration{Key: key, Operator: v1.TolerationOpExists, Effect: effect})
	}
	add(v1.TaintNodeNotReady, v1.TaintEffectNoExecute)
	add(v1.TaintNodeUnreachable, v1.TaintEffectNoExecute)
	add(v1.TaintNodeDiskPressure, v1.TaintEffectNoSchedule)
	add(v1.TaintNodeMemoryPressure, v1.TaintEffectNoSchedule)
	add(v1.TaintNodePIDPressure, v1.TaintEffectNoSchedule)
	add(v1.TaintNodeUnschedulable, v1.TaintEffectNoSchedule)
	if p.Spec.HostNetwork {
		add(v1.TaintNodeNetworkUnavailable, v1.TaintEffectNoSchedule)
	}
}
