package schedule

import (
	"fmt"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"math/rand"
	"reflect"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestPendingReasonInTheSchedulersWords(t *testing.T) {
	// 40 devices: 25 outside the selector, 10 unreachable, 5 full.
	var devs []Device
	var pods []*v1.Pod
	for i := range 40 {
		d := device(fmt.Sprintf("dev%02d", i), "line=1")
		switch {
		case i < 25:
			d.Labels["line"] = "2"
		case i < 35:
			d.UnreachableSince = t0.Add(-10 * 60e9)
		default:
			pods = append(pods, pod(fmt.Sprintf("big%02d", i), d.Name, nil, "", "3Gi"))
		}
		devs = append(devs, d)
	}
	p := pod("web", "", nil, "100m", "2Gi")
	p.Spec.NodeSelector = map[string]string{"line": "1"}
	plan := Schedule(Input{Now: t0, Devices: devs, Pods: append(pods, p)})
	got := mustPend(t, plan, "web").Message
	want := "0/40 devices are available: 10 node(s) had untolerated taint {node.kubernetes.io/unreachable: }, " +
		"25 node(s) didn't match Pod's node affinity/selector, 5 Insufficient memory. " +
		"preemption: 0/40 devices are available: 35 Preemption is not helpful for scheduling, " +
		"5 No preemption victims found for incoming pod."
	if got != want {
		t.Errorf("message\n got %q\nwant %q", got, want)
	}
}

func TestResourceFitCountsPlacedPods(t *testing.T) {
	devs := []Device{device("a"), device("b")}
	pods := []*v1.Pod{pod("on-a", "a", nil, "3", "1Gi"), pod("new", "", nil, "2", "1Gi")}
	mustBind(t, Schedule(Input{Now: t0, Devices: devs, Pods: pods}), "new", "b")
	// Both full: Insufficient cpu on each.
	pods = append(pods, pod("on-b", "b", nil, "3", "1Gi"))
	got := mustPend(t, Schedule(Input{Now: t0, Devices: devs, Pods: pods}), "new").Message
	if want := "0/2 devices are available: 2 Insufficient cpu."; got[:len(want)] != want {
		t.Errorf("got %q, want prefix %q", got, want)
	}
}

func TestTooManyPodsAndUnreportedAllocatable(t *testing.T) {
	d := device("a")
	d.Allocatable[v1.ResourcePods] = *resourceQ("1")
	none := Device{Name: "b"} // never reported allocatable: requests do not fit, 110 pods do
	pods := []*v1.Pod{pod("x", "a", nil, "", ""), pod("new", "", nil, "", "1Mi"), pod("free", "", nil, "", "")}
	plan := Schedule(Input{Now: t0, Devices: []Device{d, none}, Pods: pods})
	got := mustPend(t, plan, "new").Message
	if want := "0/2 devices are available: 1 Insufficient memory, 1 Too many pods."; got[:len(want)] != want {
		t.Errorf("got %q, want prefix %q", got, want)
	}
	mustBind(t, plan, "free", "b")
}

func TestCordonedDevice(t *testing.T) {
	d := device("a")
	d.Unschedulable = true
	plan := Schedule(Input{Now: t0, Devices: []Device{d}, Pods: []*v1.Pod{pod("p", "", nil, "", "")}})
	if got, want := mustPend(t, plan, "p").Message, "0/1 devices are available: 1 node(s) were unschedulable."; got[:len(want)] != want {
		t.Errorf("got %q, want prefix %q", got, want)
	}
	// A DaemonSet still runs there: its pods tolerate unschedulable.
	plan = Schedule(Input{Now: t0, Devices: []Device{d}, DaemonSets: []*appsv1DaemonSet{daemonSet("agent", kv("app=agent"), "", "")}})
	if len(plan.Create) != 1 || len(plan.Bindings) != 1 || plan.Bindings[0].Device != "a" {
		t.Fatalf("daemon pod on cordoned device: create %d, bindings %v", len(plan.Create), plan.Bindings)
	}
}

func TestTaintsAndTolerations(t *testing.T) {
	gpu := device("gpu")
	gpu.Taints = []v1.Taint{{Key: "dedicated", Value: "gpu", Effect: v1.TaintEffectNoSchedule}}
	soft := device("soft")
	soft.Taints = []v1.Taint{{Key: "flaky", Effect: v1.TaintEffectPreferNoSchedule}}
	plain := device("plain")
	tolerant := pod("tolerant", "", nil, "", "")
	tolerant.Spec.Tolerations = []v1.Toleration{{Key: "dedicated", Operator: v1.TolerationOpEqual, Value: "gpu", Effect: v1.TaintEffectNoSchedule}}
	tolerant.Spec.NodeSelector = map[string]string{v1.LabelHostname: "gpu"}
	intolerant := pod("intolerant", "", nil, "", "")
	intolerant.Spec.NodeSelector = map[string]string{v1.LabelHostname: "gpu"}
	avoider := pod("avoider", "", nil, "", "")
	avoider.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{
			{Key: v1.LabelHostname, Operator: v1.NodeSelectorOpIn, Values: []string{"soft", "plain"}}}}}}}}
	plan := Schedule(Input{Now: t0, Devices: []Device{gpu, soft, plain}, Pods: []*v1.Pod{tolerant, intolerant, avoider}})
	mustBind(t, plan, "tolerant", "gpu")
	got := mustPend(t, plan, "intolerant").Message
	if want := "0/3 devices are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 node(s) didn't match Pod's node affinity/selector."; got[:len(want)] != want {
		t.Errorf("got %q, want prefix %q", got, want)
	}
	mustBind(t, plan, "avoider", "plain") // PreferNoSchedule scores soft lower
}

func TestPreferredNodeAffinity(t *testing.T) {
	p := pod("p", "", nil, "", "")
	p.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []v1.PreferredSchedulingTerm{
		{Weight: 10, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "site", Operator: v1.NodeSelectorOpIn, Values: []string{"north"}}}}},
		{Weight: 80, Preference: v1.NodeSelectorTerm{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "site", Operator: v1.NodeSelectorOpIn, Values: []string{"south"}}}}},
	}}}
	plan := Schedule(Input{Now: t0, Devices: []Device{device("a", "site=north"), device("b", "site=south"), device("c")}, Pods: []*v1.Pod{p}})
	mustBind(t, plan, "p", "b")
}

func TestNoDevices(t *testing.T) {
	plan := Schedule(Input{Now: t0, Pods: []*v1.Pod{pod("p", "", nil, "", "")}})
	if got := mustPend(t, plan, "p").Message; got != "no devices available to schedule pods" {
		t.Errorf("got %q", got)
	}
}

func TestMissingPriorityClassLeavesBarePodPending(t *testing.T) {
	p := pod("p", "", nil, "", "")
	p.Spec.PriorityClassName = "gold"
	plan := Schedule(Input{Now: t0, Devices: []Device{device("a")}, Pods: []*v1.Pod{p}})
	if got, want := mustPend(t, plan, "p").Message, `pods "p" is forbidden: no PriorityClass with name gold was found`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	var devs []Device
	for i := range 30 {
		devs = append(devs, device(fmt.Sprintf("d%02d", i), fmt.Sprintf("%s=z%d", v1.LabelTopologyZone, i%3)))
	}
	web := deployment("web", 20, kv("app=web"), "100m", "64Mi")
	agent := daemonSet("agent", kv("app=agent"), "10m", "16Mi")
	var pods []*v1.Pod
	for i := range 10 {
		pods = append(pods, pod(fmt.Sprintf("bare%d", i), "", nil, "200m", "100Mi"))
	}
	first := Schedule(Input{Now: t0, Devices: devs, Deployments: []*appsv1Deployment{web}, DaemonSets: []*appsv1DaemonSet{agent}, Pods: pods})
	if len(first.Bindings) != 20+30+10 {
		t.Fatalf("%d bindings, want 60", len(first.Bindings))
	}
	r := rand.New(rand.NewSource(1))
	for range 5 {
		d2 := append([]Device(nil), devs...)
		r.Shuffle(len(d2), func(i, j int) { d2[i], d2[j] = d2[j], d2[i] })
		p2 := append([]*v1.Pod(nil), pods...)
		r.Shuffle(len(p2), func(i, j int) { p2[i], p2[j] = p2[j], p2[i] })
		again := Schedule(Input{Now: t0, Devices: d2, Deployments: []*appsv1Deployment{web}, DaemonSets: []*appsv1DaemonSet{agent}, Pods: p2})
		if !reflect.DeepEqual(bindingMap(first), bindingMap(again)) {
			t.Fatal("the same fleet in another order gave other placements")
		}
	}
}

func bindingMap(p Plan) map[string]string {
	m := map[string]string{}
	for _, b := range p.Bindings {
		m[b.Pod.String()] = b.Device
	}
	return m
}

func TestDefaultSpreadBalancesADeployment(t *testing.T) {
	// No constraints: the system defaults (hostname 3, zone 5,
	// ScheduleAnyway) spread 6 replicas over 3 zones of 2 devices.
	var devs []Device
	for i := range 6 {
		devs = append(devs, device(fmt.Sprintf("d%d", i), fmt.Sprintf("%s=z%d", v1.LabelTopologyZone, i%3)))
	}
	plan := Schedule(Input{Now: t0, Devices: devs, Deployments: []*appsv1Deployment{deployment("web", 6, kv("app=web"), "", "")}})
	perDevice := map[string]int{}
	for _, b := range plan.Bindings {
		perDevice[b.Device]++
	}
	for _, d := range devs {
		if perDevice[d.Name] != 1 {
			t.Errorf("device %s has %d replicas, want 1 (%v)", d.Name, perDevice[d.Name], perDevice)
		}
	}
}

var _ = metav1.Now

type (
	appsv1Deployment = appsv1.Deployment
	appsv1DaemonSet  = appsv1.DaemonSet
)

func resourceQ(s string) *resource.Quantity { q := resource.MustParse(s); return &q }
