package schedule

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
)

// randomFleet is a fleet of zones × devices with random capacities,
// taints, cordons and silent devices, and random workloads. Spread
// workloads get the "high" class so that no preemption disturbs the skew
// the checker replays.
func randomFleet(r *rand.Rand) Input {
	in := Input{Now: t0, PriorityClasses: PriorityClassesForTest()}
	zones := 1 + r.Intn(4)
	for i := range 3 + r.Intn(28) {
		d := Device{Name: fmt.Sprintf("d%02d", i), Labels: map[string]string{}, Allocatable: v1.ResourceList{
			v1.ResourceCPU:    *resource.NewMilliQuantity(int64(500+r.Intn(3500)), resource.DecimalSI),
			v1.ResourceMemory: *resource.NewQuantity(int64(256+r.Intn(3840))<<20, resource.BinarySI),
			v1.ResourcePods:   *resource.NewQuantity(int64(3+r.Intn(15)), resource.DecimalSI),
		}}
		if r.Intn(10) > 0 {
			d.Labels[v1.LabelTopologyZone] = fmt.Sprintf("z%d", r.Intn(zones))
		}
		switch r.Intn(20) {
		case 0, 1, 2:
			d.Taints = append(d.Taints, v1.Taint{Key: "dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule})
		case 3, 4:
			d.Taints = append(d.Taints, v1.Taint{Key: "flaky", Effect: v1.TaintEffectPreferNoSchedule})
		case 5:
			added := metav1.NewTime(t0.Add(-time.Hour))
			d.Taints = append(d.Taints, v1.Taint{Key: "evict", Effect: v1.TaintEffectNoExecute, TimeAdded: &added})
		case 6, 7:
			d.Unschedulable = true
		case 8:
			d.UnreachableSince = t0.Add(-time.Duration(r.Intn(600)) * time.Second)
		}
		in.Devices = append(in.Devices, d)
	}
	for i := range 1 + r.Intn(3) {
		labels := map[string]string{"app": fmt.Sprintf("web%d", i)}
		d := deployment(fmt.Sprintf("web%d", i), int32(r.Intn(16)), labels,
			fmt.Sprintf("%dm", 50+r.Intn(700)), fmt.Sprintf("%dMi", 32+r.Intn(400)))
		spec := &d.Spec.Template.Spec
		switch r.Intn(4) {
		case 0, 1:
			spec.PriorityClassName = "high"
			c := v1.TopologySpreadConstraint{MaxSkew: int32(1 + r.Intn(2)), TopologyKey: v1.LabelTopologyZone,
				WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}
			if r.Intn(3) == 0 {
				c.TopologyKey = v1.LabelHostname
			}
			if r.Intn(4) == 0 {
				c.MinDomains = int32p(int32(1 + r.Intn(zones+1)))
			}
			if r.Intn(3) == 0 {
				honor := v1.NodeInclusionPolicyHonor
				c.NodeTaintsPolicy = &honor
			}
			spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{c}
		case 2:
			spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: v1.LabelTopologyZone,
				WhenUnsatisfiable: v1.ScheduleAnyway, LabelSelector: &metav1.LabelSelector{MatchLabels: labels}}}
		}
		if r.Intn(3) == 0 {
			spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpExists}}
		}
		if r.Intn(4) == 0 {
			spec.NodeSelector = map[string]string{v1.LabelTopologyZone: fmt.Sprintf("z%d", r.Intn(zones))}
		}
		in.Deployments = append(in.Deployments, d)
	}
	if r.Intn(2) == 0 {
		in.DaemonSets = append(in.DaemonSets, daemonSet("agent", kv("app=agent"), "20m", "16Mi"))
	}
	for i := range r.Intn(12) {
		p := pod(fmt.Sprintf("bare%d", i), "", kv("app=bare"), fmt.Sprintf("%dm", 100+r.Intn(900)), fmt.Sprintf("%dMi", 64+r.Intn(512)))
		p = withPriority(p, []int32{0, 10, 50, 200}[r.Intn(4)])
		in.Pods = append(in.Pods, p)
	}
	return in
}

func TestRandomFleetsKeepTheInvariants(t *testing.T) {
	placed, pending := 0, 0
	for seed := int64(1); seed <= 60; seed++ {
		r := rand.New(rand.NewSource(seed))
		in := randomFleet(r)
		for pass := range 4 {
			plan := Schedule(in)
			checkPlan(t, fmt.Sprintf("seed %d pass %d", seed, pass), in, plan)
			placed += len(plan.Bindings)
			pending += len(plan.Pending)
			in = apply(in, plan, in.Now.Add(2*time.Minute))
			// Between passes: terminating pods finish, a device may go silent.
			in = removeTerminating(in)
			if r.Intn(2) == 0 && len(in.Devices) > 0 {
				in.Devices[r.Intn(len(in.Devices))].UnreachableSince = in.Now
			}
		}
	}
	if placed == 0 || pending == 0 {
		t.Fatalf("random fleets exercised too little: %d placed, %d pending", placed, pending)
	}
	t.Logf("%d placements and %d pending decisions checked", placed, pending)
}

// checkPlan checks one pass's plan against the fleet it came from, with
// counting of its own: every binding tolerates the device's NoSchedule
// and NoExecute taints and cordon, matches its nodeSelector, fits what
// the device has left, and respects maxSkew of its DoNotSchedule
// constraints at the moment it was made; every unbound pod is pending
// with a reason.
func checkPlan(t *testing.T, where string, in Input, plan Plan) {
	t.Helper()
	nodes := map[string]*v1.Node{}
	for i := range in.Devices {
		nodes[in.Devices[i].Name] = in.Devices[i].Node()
	}
	pods := map[types.NamespacedName]*v1.Pod{}
	for _, p := range append(append([]*v1.Pod(nil), in.Pods...), plan.Create...) {
		pods[keyOf(p)] = p.DeepCopy()
	}
	deleted := map[types.NamespacedName]bool{}
	for _, d := range plan.Deletions {
		deleted[d.Pod] = true
	}
	// Live pods per device, as the scheduler counts them for spread
	// (deletions of this pass happen before any binding, save preemption
	// victims, which never match a spread workload here).
	onNode := map[string][]*v1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			onNode[p.Spec.NodeName] = append(onNode[p.Spec.NodeName], p)
		}
	}
	for _, b := range plan.Bindings {
		p, n := pods[b.Pod], nodes[b.Device]
		if p == nil || n == nil {
			t.Fatalf("%s: binding %v of an unknown pod or device", where, b)
		}
		if taint := untolerated(p, n); taint != nil {
			t.Errorf("%s: %s placed on %s with untolerated taint %v", where, b.Pod, b.Device, taint)
		}
		for k, v := range p.Spec.NodeSelector {
			if n.Labels[k] != v {
				t.Errorf("%s: %s placed on %s outside its nodeSelector", where, b.Pod, b.Device)
			}
		}
		checkSkew(t, where, p, b.Device, nodes, onNode, deleted)
		p.Spec.NodeName = b.Device
		onNode[b.Device] = append(onNode[b.Device], p)
	}
	for name, n := range nodes {
		var cpu, mem int64
		for _, p := range onNode[name] {
			for _, c := range p.Spec.Containers {
				cpu += c.Resources.Requests.Cpu().MilliValue()
				mem += c.Resources.Requests.Memory().Value()
			}
		}
		bound := false
		for _, b := range plan.Bindings {
			bound = bound || b.Device == name
		}
		if !bound {
			continue // allocatable is checked where this pass placed pods
		}
		if cpu > n.Status.Allocatable.Cpu().MilliValue() || mem > n.Status.Allocatable.Memory().Value() ||
			int64(len(onNode[name])) > n.Status.Allocatable.Pods().Value() {
			t.Errorf("%s: device %s over allocatable: %dm CPU, %d bytes, %d pods", where, name, cpu, mem, len(onNode[name]))
		}
	}
	accounted := map[types.NamespacedName]int{}
	for _, b := range plan.Bindings {
		accounted[b.Pod]++
	}
	for _, p := range plan.Pending {
		accounted[p.Pod]++
		if p.Message == "" {
			t.Errorf("%s: %s pending without a reason", where, p.Pod)
		}
	}
	for key, p := range pods {
		if p.Spec.NodeName == "" && p.DeletionTimestamp == nil && !deleted[key] && accounted[key] != 1 {
			t.Errorf("%s: unbound pod %s bound or pending %d times", where, key, accounted[key])
		}
	}
}

// checkSkew recounts a DoNotSchedule constraint just before the binding.
func checkSkew(t *testing.T, where string, p *v1.Pod, device string, nodes map[string]*v1.Node,
	onNode map[string][]*v1.Pod, deleted map[types.NamespacedName]bool) {
	t.Helper()
	for _, c := range p.Spec.TopologySpreadConstraints {
		if c.WhenUnsatisfiable != v1.DoNotSchedule {
			continue
		}
		sel, _ := metav1.LabelSelectorAsSelector(c.LabelSelector)
		counts := map[string]int{}
		for name, n := range nodes {
			v, ok := n.Labels[c.TopologyKey]
			if !ok || !labels.SelectorFromSet(p.Spec.NodeSelector).Matches(labels.Set(n.Labels)) {
				continue
			}
			if c.NodeTaintsPolicy != nil && *c.NodeTaintsPolicy == v1.NodeInclusionPolicyHonor && untolerated(p, n) != nil {
				continue
			}
			if _, seen := counts[v]; !seen {
				counts[v] = 0
			}
			for _, q := range onNode[name] {
				if q.DeletionTimestamp == nil && !deleted[keyOf(q)] && q.Namespace == p.Namespace && sel.Matches(labels.Set(q.Labels)) {
					counts[v]++
				}
			}
		}
		minDomains := int32(1)
		if c.MinDomains != nil {
			minDomains = *c.MinDomains
		}
		low := 0
		if len(counts) >= int(minDomains) {
			low = int(^uint(0) >> 1)
			for _, n := range counts {
				low = min(low, n)
			}
		}
		v := nodes[device].Labels[c.TopologyKey]
		if skew := counts[v] + 1 - low; skew > int(c.MaxSkew) {
			t.Errorf("%s: %s placed on %s (%s=%s) with skew %d > maxSkew %d (counts %v)", where, keyOf(p), device, c.TopologyKey, v, skew, c.MaxSkew, counts)
		}
	}
}

// untolerated is a taint of n, PreferNoSchedule aside, that p does not
// tolerate, or nil.
func untolerated(p *v1.Pod, n *v1.Node) *v1.Taint {
	for i := range n.Spec.Taints {
		taint := &n.Spec.Taints[i]
		if taint.Effect == v1.TaintEffectPreferNoSchedule {
			continue
		}
		ok := false
		for _, tol := range p.Spec.Tolerations {
			ok = ok || tol.ToleratesTaint(quiet, taint, false)
		}
		if !ok {
			return taint
		}
	}
	return nil
}

var _ = appsv1.DaemonSet{}
