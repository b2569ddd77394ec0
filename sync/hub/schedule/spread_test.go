package schedule

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The worked examples of the Kubernetes "Pod Topology Spread Constraints"
// document: nodes node1..node4 labelled node=nodeN and zone=zoneA/zoneB.

func docNodes(extra ...Device) []Device {
	return append([]Device{
		device("node1", "node=node1", "zone=zoneA"),
		device("node2", "node=node2", "zone=zoneA"),
		device("node3", "node=node3", "zone=zoneB"),
		device("node4", "node=node4", "zone=zoneB"),
	}, extra...)
}

var fooBar = map[string]string{"foo": "bar"}

// mypod is the document's incoming pod with the given constraints
// (labelSelector foo=bar, DoNotSchedule unless changed).
func mypod(constraints ...v1.TopologySpreadConstraint) *v1.Pod {
	p := pod("mypod", "", fooBar, "", "")
	for i := range constraints {
		if constraints[i].LabelSelector == nil {
			constraints[i].LabelSelector = &metav1.LabelSelector{MatchLabels: fooBar}
		}
		if constraints[i].WhenUnsatisfiable == "" {
			constraints[i].WhenUnsatisfiable = v1.DoNotSchedule
		}
	}
	p.Spec.TopologySpreadConstraints = constraints
	return p
}

func existing(nodes ...string) []*v1.Pod {
	var out []*v1.Pod
	for i, n := range nodes {
		out = append(out, pod("p"+string(rune('1'+i)), n, fooBar, "", ""))
	}
	return out
}

func TestSpreadDocOneConstraint(t *testing.T) {
	in := Input{Now: t0, Devices: docNodes(),
		Pods: append(existing("node1", "node2", "node3"), mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone"}))}
	mustBind(t, Schedule(in), "mypod", "node3", "node4")
}

func TestSpreadDocMaxSkewTwoAllowsZoneA(t *testing.T) {
	// "Change maxSkew to a bigger value - such as 2 - so that the incoming
	// Pod can be placed into zone A as well": every node is feasible.
	p := mypod(v1.TopologySpreadConstraint{MaxSkew: 2, TopologyKey: "zone"})
	in := Input{Now: t0, Devices: docNodes(), Pods: append(existing("node1", "node2", "node3"), p)}
	s := newState(in)
	c := s.newCycle(s.pods[ref("mypod")])
	for _, n := range s.nodes {
		if st := c.filter(n); st.code != fits {
			t.Errorf("%s: %v, want feasible with maxSkew 2", n.name, st.reasons)
		}
	}
}

func TestSpreadDocTopologyKeyNode(t *testing.T) {
	// "Change topologyKey to node ... the incoming Pod can only be placed
	// onto the node node4."
	in := Input{Now: t0, Devices: docNodes(),
		Pods: append(existing("node1", "node2", "node3"), mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "node"}))}
	mustBind(t, Schedule(in), "mypod", "node4")
}

func TestSpreadDocTwoConstraints(t *testing.T) {
	in := Input{Now: t0, Devices: docNodes(), Pods: append(existing("node1", "node2", "node3"),
		mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone"}, v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "node"}))}
	mustBind(t, Schedule(in), "mypod", "node4")
}

func TestSpreadDocConflictingConstraints(t *testing.T) {
	devs := docNodes()[:3]
	in := Input{Now: t0, Devices: devs, Pods: append(existing("node1", "node1", "node2", "node3", "node3"),
		mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone"}, v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "node"}))}
	got := mustPend(t, Schedule(in), "mypod")
	want := "0/3 devices are available: 3 node(s) didn't match pod topology spread constraints. " +
		"preemption: 0/3 devices are available: 3 No preemption victims found for incoming pod."
	if got.Message != want {
		t.Errorf("message\n got %q\nwant %q", got.Message, want)
	}
}

func TestSpreadDocNodeMissingTopologyKeyIsBypassed(t *testing.T) {
	// "suppose the node node1 does not have a label zone, then the 2 Pods
	// will be disregarded, hence the incoming Pod will be scheduled into
	// zone A."
	devs := docNodes()[:3]
	devs[0] = device("node1", "node=node1")
	in := Input{Now: t0, Devices: devs, Pods: append(existing("node1", "node1", "node2", "node3", "node3"),
		mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone"}, v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "node"}))}
	mustBind(t, Schedule(in), "mypod", "node2")
}

func zoneCNode() Device { return device("node5", "node=node5", "zone=zoneC") }

func notInZoneC(p *v1.Pod) *v1.Pod {
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: "zone", Operator: v1.NodeSelectorOpNotIn, Values: []string{"zoneC"}}}}}}}}
	return p
}

func TestSpreadDocNodeAffinityExcludesZoneC(t *testing.T) {
	// With nodeAffinityPolicy Honor (the default) zone C does not count,
	// so mypod goes to zone B instead of zone C.
	p := notInZoneC(mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone"}))
	in := Input{Now: t0, Devices: docNodes(zoneCNode()), Pods: append(existing("node1", "node2", "node3"), p)}
	mustBind(t, Schedule(in), "mypod", "node3", "node4")
}

func TestSpreadNodeAffinityPolicyIgnoreCountsZoneC(t *testing.T) {
	// With Ignore, empty zone C holds the global minimum at 0: zone B
	// (1+1-0 = 2) breaks maxSkew 1 and zone C is excluded by affinity.
	ignore := v1.NodeInclusionPolicyIgnore
	p := notInZoneC(mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", NodeAffinityPolicy: &ignore}))
	in := Input{Now: t0, Devices: docNodes(zoneCNode()), Pods: append(existing("node1", "node2", "node3"), p)}
	got := mustPend(t, Schedule(in), "mypod")
	want := "0/5 devices are available: 1 node(s) didn't match Pod's node affinity/selector, 4 node(s) didn't match pod topology spread constraints."
	if got.Message[:len(want)] != want {
		t.Errorf("message\n got %q\nwant prefix %q", got.Message, want)
	}
}

func TestSpreadNodeTaintsPolicy(t *testing.T) {
	tainted := zoneCNode()
	tainted.Taints = []v1.Taint{{Key: "maintenance", Effect: v1.TaintEffectNoSchedule}}
	for _, tc := range []struct {
		policy v1.NodeInclusionPolicy
		pend   bool
	}{
		// Ignore (default): tainted empty zone C counts, min 0, zone B blocked.
		{v1.NodeInclusionPolicyIgnore, true},
		// Honor: zone C is not a domain, min 1, zone B fits.
		{v1.NodeInclusionPolicyHonor, false},
	} {
		policy := tc.policy
		p := mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", NodeTaintsPolicy: &policy})
		in := Input{Now: t0, Devices: docNodes(tainted), Pods: append(existing("node1", "node2", "node3"), p)}
		plan := Schedule(in)
		if tc.pend {
			got := mustPend(t, plan, "mypod")
			want := "0/5 devices are available: 1 node(s) had untolerated taint {maintenance: }, 4 node(s) didn't match pod topology spread constraints."
			if got.Message[:len(want)] != want {
				t.Errorf("%s: message\n got %q\nwant prefix %q", policy, got.Message, want)
			}
		} else {
			mustBind(t, plan, "mypod", "node3", "node4")
		}
	}
}

func TestSpreadMinDomains(t *testing.T) {
	// Two zones with one pod each. minDomains 3 > 2 eligible domains: the
	// global minimum is 0, so each zone's skew is 1+1-0 = 2 > 1.
	devs := []Device{device("a1", "zone=a"), device("b1", "zone=b")}
	pods := []*v1.Pod{pod("p1", "a1", fooBar, "", ""), pod("p2", "b1", fooBar, "", "")}
	three := mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", MinDomains: int32p(3)})
	mustPend(t, Schedule(Input{Now: t0, Devices: devs, Pods: append(pods, three)}), "mypod")
	// minDomains 2 is met: the minimum is 1, and either zone fits.
	two := mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", MinDomains: int32p(2)})
	mustBind(t, Schedule(Input{Now: t0, Devices: devs, Pods: append(pods, two)}), "mypod", "a1", "b1")
	// A third zone joins: minDomains 3 is met and its 0 is the minimum.
	devs = append(devs, device("c1", "zone=c"))
	three = mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", MinDomains: int32p(3)})
	mustBind(t, Schedule(Input{Now: t0, Devices: devs, Pods: append(pods, three)}), "mypod", "c1")
}

func TestSpreadMatchLabelKeysCountsOnlyTheSameRevision(t *testing.T) {
	// Two old-revision pods in zone A do not count for the new revision.
	old := map[string]string{"foo": "bar", "rev": "1"}
	p := mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", MatchLabelKeys: []string{"rev"}})
	p.Labels = map[string]string{"foo": "bar", "rev": "2"}
	pods := []*v1.Pod{pod("o1", "node1", old, "", ""), pod("o2", "node2", old, "", ""),
		pod("n1", "node3", map[string]string{"foo": "bar", "rev": "2"}, "", ""), p}
	mustBind(t, Schedule(Input{Now: t0, Devices: docNodes(), Pods: pods}), "mypod", "node1", "node2")
}

func TestSpreadScheduleAnywayPrefersEmptierZone(t *testing.T) {
	p := mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: v1.ScheduleAnyway})
	in := Input{Now: t0, Devices: docNodes(), Pods: append(existing("node1", "node2", "node3"), p)}
	mustBind(t, Schedule(in), "mypod", "node4")
}

func TestSpreadOtherNamespacesAndTerminatingPodsDoNotCount(t *testing.T) {
	pods := existing("node3", "node4")
	pods[0].Namespace = "other"
	ts := metav1.NewTime(t0)
	pods[1].DeletionTimestamp = &ts
	pods = append(pods, pod("a", "node1", fooBar, "", ""))
	// zone A 1, zone B 0 live matching pods in default: only zone B fits.
	p := mypod(v1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: "zone"})
	pods = append(pods, pod("b", "node2", fooBar, "", ""))
	mustBind(t, Schedule(Input{Now: t0, Devices: docNodes(), Pods: append(pods, p)}), "mypod", "node3", "node4")
}

func TestMatchCountsTellEverythingFromNothing(t *testing.T) {
	s := newState(Input{Now: t0, Devices: docNodes(), Pods: existing("node1")})
	all := s.matchCountsFor(labelsEverything(), "default")
	none := s.matchCountsFor(labelsNothing(), "default")
	if all.perNode[0] != 1 || none.perNode[0] != 0 {
		t.Fatalf("everything counts %v, nothing counts %v", all.perNode, none.perNode)
	}
}
