package schedule

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

func zoned(n int) []Device {
	var devs []Device
	for i := range n {
		devs = append(devs, device(fmt.Sprintf("dev%d", i), fmt.Sprintf("%s=%c", v1.LabelTopologyZone, 'a'+i%3)))
	}
	return devs
}

func TestDaemonSetOnePodPerMatchingDevice(t *testing.T) {
	devs := zoned(4)
	devs[3].Labels["role"] = "spare"
	ds := daemonSet("agent", kv("app=agent"), "10m", "")
	ds.Spec.Template.Spec.Affinity = &v1.Affinity{NodeAffinity: &v1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &v1.NodeSelector{
		NodeSelectorTerms: []v1.NodeSelectorTerm{{MatchExpressions: []v1.NodeSelectorRequirement{{Key: "role", Operator: v1.NodeSelectorOpDoesNotExist}}}}}}}
	in := Input{Now: t0, Devices: devs, DaemonSets: []*appsv1.DaemonSet{ds}}
	plan := Schedule(in)
	if len(plan.Create) != 3 {
		t.Fatalf("created %d pods, want 3", len(plan.Create))
	}
	onDevice := map[string]string{}
	for _, b := range plan.Bindings {
		onDevice[b.Device] = b.Pod.Name
	}
	for _, p := range plan.Create {
		if !strings.HasPrefix(p.Name, "agent-") || len(p.Name) != len("agent-")+5 {
			t.Errorf("name %q, want agent-xxxxx", p.Name)
		}
		if ref := metav1.GetControllerOf(p); ref == nil || ref.Kind != "DaemonSet" || ref.Name != "agent" {
			t.Errorf("%s: owner %v", p.Name, p.OwnerReferences)
		}
		if p.Labels["app"] != "agent" || p.Labels[LabelControllerHash] == "" {
			t.Errorf("%s: labels %v", p.Name, p.Labels)
		}
		pins := workloads.PinnedNodes(p)
		if len(pins) != 1 || onDevice[pins[0]] != p.Name {
			t.Errorf("%s: pinned to %v, bound %v", p.Name, pins, onDevice)
		}
		if *p.Spec.Priority != 0 {
			t.Errorf("priority %d", *p.Spec.Priority)
		}
	}
	if _, ok := onDevice["dev3"]; ok {
		t.Error("daemon pod on the device its affinity excludes")
	}
	// A second pass changes nothing.
	in = apply(in, plan, t0.Add(time.Second))
	if again := Schedule(in); len(again.Create)+len(again.Bindings)+len(again.Deletions)+len(again.Pending) != 0 {
		t.Errorf("second pass not idle: %+v", again)
	}
	// The device is relabelled out: its pod goes.
	in.Devices[0].Labels["role"] = "spare"
	plan = Schedule(in)
	if len(plan.Deletions) != 1 || plan.Deletions[0].Reason != ReasonNotEligible || plan.Deletions[0].Pod.Name != onDevice["dev0"] {
		t.Errorf("deletions %v, want the pod on dev0 as NotEligible", plan.Deletions)
	}
}

func TestDeviceLostReplacesDeploymentPodNotDaemonPod(t *testing.T) {
	devs := zoned(3)
	web := deployment("web", 1, kv("app=web"), "100m", "")
	web.Spec.Template.Spec.NodeSelector = map[string]string{v1.LabelTopologyZone: "a"}
	agent := daemonSet("agent", kv("app=agent"), "10m", "")
	in := Input{Now: t0, Devices: append(devs, device("dev3", v1.LabelTopologyZone+"=a")), Deployments: []*appsv1.Deployment{web}, DaemonSets: []*appsv1.DaemonSet{agent}}
	plan := Schedule(in)
	in = apply(in, plan, t0)
	var webPod, lost string
	for _, p := range in.Pods {
		if strings.HasPrefix(p.Name, "web-") {
			webPod, lost = p.Name, p.Spec.NodeName
		}
	}
	if lost == "" {
		t.Fatalf("web pod not placed: %+v", plan.Pending)
	}
	daemonOnLost := ""
	for _, name := range podsOn(in, lost) {
		if strings.HasPrefix(name, "agent-") {
			daemonOnLost = name
		}
	}
	// The device goes silent at T.
	silentAt := t0.Add(time.Minute)
	for i := range in.Devices {
		if in.Devices[i].Name == lost {
			in.Devices[i].UnreachableSince = silentAt
		}
	}
	// 299 s later nothing moves.
	in.Now = silentAt.Add(299 * time.Second)
	if plan := Schedule(in); len(plan.Deletions)+len(plan.Create) != 0 {
		t.Fatalf("before the toleration ran out: deletions %v created %d", plan.Deletions, len(plan.Create))
	}
	// At 300 s the web pod is NodeLost and replaced on the other zone-a device.
	in.Now = silentAt.Add(300 * time.Second)
	plan = Schedule(in)
	d, ok := deletionOf(plan, webPod)
	if !ok || d.Reason != ReasonNodeLost {
		t.Fatalf("web pod deletion %+v, want NodeLost", d)
	}
	if _, ok := deletionOf(plan, daemonOnLost); ok {
		t.Fatal("the DaemonSet pod on the lost device was deleted")
	}
	if len(plan.Create) != 1 {
		t.Fatalf("created %d, want 1 replacement", len(plan.Create))
	}
	other := "dev0"
	if lost == "dev0" {
		other = "dev3"
	}
	mustBind(t, plan, plan.Create[0].Name, other)
	// An hour on, the DaemonSet pod is still there and not recreated.
	in = apply(in, plan, in.Now)
	in.Now = silentAt.Add(time.Hour)
	plan = Schedule(in)
	if len(plan.Deletions)+len(plan.Create) != 0 {
		t.Fatalf("an hour later: deletions %v created %d", plan.Deletions, len(plan.Create))
	}
}

func TestShorterTolerationSecondsAndUntoleratedNoExecute(t *testing.T) {
	d := device("a")
	d.UnreachableSince = t0
	short := pod("short", "a", nil, "", "")
	ten := int64(10)
	short.Spec.Tolerations = []v1.Toleration{{Key: v1.TaintNodeUnreachable, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoExecute, TolerationSeconds: &ten}}
	bare := pod("bare", "a", nil, "", "") // stored without admission: no toleration at all
	forever := pod("forever", "a", nil, "", "")
	forever.Spec.Tolerations = []v1.Toleration{{Operator: v1.TolerationOpExists}}
	plan := Schedule(Input{Now: t0.Add(5 * time.Second), Devices: []Device{d}, Pods: []*v1.Pod{short, bare, forever}})
	if len(plan.Deletions) != 1 || plan.Deletions[0].Pod.Name != "bare" {
		t.Fatalf("at 5 s: deletions %v, want only bare", plan.Deletions)
	}
	plan = Schedule(Input{Now: t0.Add(10 * time.Second), Devices: []Device{d}, Pods: []*v1.Pod{short, forever}})
	if len(plan.Deletions) != 1 || plan.Deletions[0].Pod.Name != "short" || plan.Deletions[0].Reason != ReasonNodeLost {
		t.Fatalf("at 10 s: deletions %v, want short NodeLost", plan.Deletions)
	}
}

func TestDeploymentZoneSpreadAndScaling(t *testing.T) {
	web := deployment("web", 3, kv("app=web"), "100m", "")
	web.Spec.Template.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: v1.LabelTopologyZone,
		WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: kv("app=web")}}}
	in := Input{Now: t0, Devices: zoned(6), Deployments: []*appsv1.Deployment{web}}
	plan := Schedule(in)
	zones := map[string]int{}
	for _, b := range plan.Bindings {
		zones[zoneOf(in.Devices, b.Device)]++
	}
	if zones["a"] != 1 || zones["b"] != 1 || zones["c"] != 1 {
		t.Fatalf("replicas per zone %v, want one each", zones)
	}
	for _, p := range plan.Create {
		if p.Labels[LabelPodTemplateHash] == "" || metav1.GetControllerOf(p).Kind != "ReplicaSet" ||
			metav1.GetControllerOf(p).Name != "web-"+p.Labels[LabelPodTemplateHash] {
			t.Errorf("%s: labels %v owner %v", p.Name, p.Labels, p.OwnerReferences)
		}
	}
	// Scale to 1: two go.
	in = apply(in, plan, t0.Add(time.Second))
	*web.Spec.Replicas = 1
	plan = Schedule(in)
	if len(plan.Deletions) != 2 || plan.Deletions[0].Reason != ReasonScaledDown {
		t.Fatalf("deletions %v, want 2 ScaledDown", plan.Deletions)
	}
	// A new template rolls out (RollingUpdate, 25%: surge 1, unavailable
	// 0): the new pod first, the old one once the new is Ready.
	in = markReady(removeTerminating(apply(in, plan, t0.Add(2*time.Second))), t0)
	web.Spec.Template.Spec.Containers[0].Image = "v2"
	plan = Schedule(in)
	if len(plan.Deletions) != 0 || len(plan.Create) != 1 {
		t.Fatalf("rollout start: deletions %v created %d, want 0 and 1", plan.Deletions, len(plan.Create))
	}
	in = apply(in, plan, t0.Add(3*time.Second))
	if plan = Schedule(in); len(plan.Deletions)+len(plan.Create) != 0 {
		t.Fatalf("new pod not ready yet: deletions %v created %d", plan.Deletions, len(plan.Create))
	}
	in = markReady(in, t0.Add(3*time.Second))
	plan = Schedule(in)
	if len(plan.Deletions) != 1 || plan.Deletions[0].Reason != ReasonOutdated || len(plan.Create) != 0 {
		t.Fatalf("new pod ready: deletions %v created %d, want the old one Outdated", plan.Deletions, len(plan.Create))
	}
	// Deleting the Deployment deletes its pods.
	in = removeTerminating(apply(in, plan, t0.Add(4*time.Second)))
	in.Deployments = nil
	plan = Schedule(in)
	if len(plan.Deletions) != 1 || plan.Deletions[0].Reason != ReasonOwnerDeleted {
		t.Fatalf("deletions %v, want 1 OwnerDeleted", plan.Deletions)
	}
}

func TestSpreadThatCannotBeMetStaysPending(t *testing.T) {
	// 4 replicas, maxSkew 1 over 3 zones, but zone c is full: a, b get 1
	// each, then the third and fourth would make a skew of 2 over c's 0.
	devs := zoned(3)
	devs[2].Allocatable[v1.ResourceCPU] = *resourceQ("0")
	web := deployment("web", 4, kv("app=web"), "100m", "")
	web.Spec.Template.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: v1.LabelTopologyZone,
		WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: kv("app=web")}}}
	plan := Schedule(Input{Now: t0, Devices: devs, Deployments: []*appsv1.Deployment{web}})
	if len(plan.Bindings) != 2 || len(plan.Pending) != 2 {
		t.Fatalf("bindings %v pending %v", plan.Bindings, plan.Pending)
	}
	want := "0/3 devices are available: 1 Insufficient cpu, 2 node(s) didn't match pod topology spread constraints."
	if !strings.HasPrefix(plan.Pending[0].Message, want) {
		t.Errorf("got %q, want prefix %q", plan.Pending[0].Message, want)
	}
}

func TestMissingPriorityClassIsAFailedCreateEvent(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	web.Spec.Template.Spec.PriorityClassName = "gold"
	plan := Schedule(Input{Now: t0, Devices: zoned(1), Deployments: []*appsv1.Deployment{web}})
	if len(plan.Create) != 0 || len(plan.Events) != 2 || plan.Events[0].Reason != "FailedCreate" ||
		!strings.Contains(plan.Events[0].Message, "no PriorityClass with name gold was found") {
		t.Fatalf("create %d events %+v", len(plan.Create), plan.Events)
	}
}

func TestAdmissionGivesDefaultsAndClassValues(t *testing.T) {
	web := deployment("web", 1, kv("app=web"), "", "")
	web.Spec.Template.Spec.PriorityClassName = "high"
	plan := Schedule(Input{Now: t0, Devices: zoned(1), Deployments: []*appsv1.Deployment{web}, PriorityClasses: PriorityClassesForTest()})
	p := plan.Create[0]
	if *p.Spec.Priority != 1000 || *p.Spec.PreemptionPolicy != v1.PreemptLowerPriority {
		t.Errorf("priority %d policy %s", *p.Spec.Priority, *p.Spec.PreemptionPolicy)
	}
	var secs []string
	for _, tol := range p.Spec.Tolerations {
		secs = append(secs, fmt.Sprintf("%s:%s:%d", tol.Key, tol.Effect, *tol.TolerationSeconds))
	}
	if got := strings.Join(secs, ","); got != "node.kubernetes.io/not-ready:NoExecute:300,node.kubernetes.io/unreachable:NoExecute:300" {
		t.Errorf("tolerations %s", got)
	}
}

func zoneOf(devs []Device, name string) string {
	for _, d := range devs {
		if d.Name == name {
			return d.Labels[v1.LabelTopologyZone]
		}
	}
	return ""
}

func TestPodsOfARemovedDeviceAreDeletedAndReplaced(t *testing.T) {
	web := deployment("web", 1, kv("app=web"), "", "")
	in := Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}}
	in = apply(in, Schedule(in), t0)
	gone := in.Pods[0].Spec.NodeName
	var keep []Device
	for _, d := range in.Devices {
		if d.Name != gone {
			keep = append(keep, d)
		}
	}
	in.Devices = keep
	plan := Schedule(in)
	if d, ok := deletionOf(plan, in.Pods[0].Name); !ok || d.Reason != ReasonNodeLost {
		t.Fatalf("deletion %+v", d)
	}
	if len(plan.Create) != 1 || bindingOf(plan, plan.Create[0].Name) != keep[0].Name {
		t.Fatalf("replacement: created %d bindings %v", len(plan.Create), plan.Bindings)
	}
}

// markReady has the devices report every bound, live pod not reported
// yet Ready since at.
func markReady(in Input, at time.Time) Input {
	obs := maps.Clone(in.Observed)
	if obs == nil {
		obs = map[types.NamespacedName]workloads.Observed{}
	}
	for _, p := range in.Pods {
		if _, seen := obs[keyOf(p)]; p.Spec.NodeName != "" && p.DeletionTimestamp == nil && !seen {
			obs[keyOf(p)] = workloads.Observed{Reported: true, Phase: v1.PodRunning, Ready: true, ReadySince: at}
		}
	}
	in.Observed = obs
	return in
}

func countReason(plan Plan, reason string) int {
	n := 0
	for _, d := range plan.Deletions {
		if d.Reason == reason {
			n++
		}
	}
	return n
}

func TestDeploymentRollingUpdateKeepsAvailability(t *testing.T) {
	// 4 replicas, maxSurge 1, maxUnavailable 1: never more than 5 pods,
	// never fewer than 3 available.
	web := deployment("web", 4, kv("app=web"), "", "")
	one := intstr.FromInt32(1)
	web.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
		RollingUpdate: &appsv1.RollingUpdateDeployment{MaxSurge: &one, MaxUnavailable: &one}}
	in := Input{Now: t0, Devices: zoned(4), Deployments: []*appsv1.Deployment{web}}
	in = markReady(apply(in, Schedule(in), t0), t0)
	web.Spec.Template.Spec.Containers[0].Image = "v2"
	for pass := 1; ; pass++ {
		if pass > 20 {
			t.Fatal("rollout did not finish in 20 passes")
		}
		now := t0.Add(time.Duration(pass) * time.Minute)
		plan := Schedule(in)
		in = markReady(removeTerminating(apply(in, plan, now)), now)
		live, old := 0, 0
		for _, p := range in.Pods {
			live++
			if p.Labels[LabelPodTemplateHash] != TemplateHash(&web.Spec.Template) {
				old++
			}
		}
		if live > 5 || live < 3 {
			t.Fatalf("pass %d: %d pods, outside replicas-maxUnavailable..replicas+maxSurge", pass, live)
		}
		if len(plan.Create)+len(plan.Deletions) == 0 {
			if old != 0 || live != 4 {
				t.Fatalf("rollout stalled at pass %d with %d old of %d", pass, old, live)
			}
			break
		}
	}
}

func TestDeploymentRecreateWaitsForTheOldPods(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	web.Spec.Strategy.Type = appsv1.RecreateDeploymentStrategyType
	in := Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}}
	in = markReady(apply(in, Schedule(in), t0), t0)
	web.Spec.Template.Spec.Containers[0].Image = "v2"
	plan := Schedule(in)
	if countReason(plan, ReasonOutdated) != 2 || len(plan.Create) != 0 {
		t.Fatalf("deletions %v created %d, want both old deleted and none created", plan.Deletions, len(plan.Create))
	}
	in = apply(in, plan, t0.Add(time.Second))
	if plan = Schedule(in); len(plan.Create) != 0 {
		t.Fatal("new pods created while the old terminate")
	}
	if plan = Schedule(removeTerminating(in)); len(plan.Create) != 2 {
		t.Fatalf("created %d once the old were gone, want 2", len(plan.Create))
	}
}

func TestDaemonSetRollingUpdateOneDeviceAtATime(t *testing.T) {
	agent := daemonSet("agent", kv("app=agent"), "", "")
	in := Input{Now: t0, Devices: zoned(3), DaemonSets: []*appsv1.DaemonSet{agent}}
	in = markReady(apply(in, Schedule(in), t0), t0)
	agent.Spec.Template.Spec.Containers[0].Image = "v2"
	for pass := 1; pass <= 3; pass++ {
		now := t0.Add(time.Duration(pass) * time.Minute)
		plan := Schedule(in)
		if countReason(plan, ReasonOutdated) != 1 || len(plan.Create) != 0 {
			t.Fatalf("pass %d: deletions %v created %d, want one old pod deleted (maxUnavailable 1)", pass, plan.Deletions, len(plan.Create))
		}
		in = apply(in, plan, now)
		if plan = Schedule(in); len(plan.Create)+len(plan.Deletions) != 0 {
			t.Fatalf("pass %d: acted while the old pod terminates: %+v", pass, plan)
		}
		in = removeTerminating(in)
		plan = Schedule(in)
		if len(plan.Create) != 1 || len(plan.Deletions) != 0 {
			t.Fatalf("pass %d: created %d deletions %v, want the new pod", pass, len(plan.Create), plan.Deletions)
		}
		in = markReady(apply(in, plan, now), now)
	}
	if plan := Schedule(in); len(plan.Create)+len(plan.Deletions) != 0 {
		t.Fatalf("rollout not finished: %+v", plan)
	}
}

func TestDaemonSetOnDeleteKeepsOldPods(t *testing.T) {
	agent := daemonSet("agent", kv("app=agent"), "", "")
	agent.Spec.UpdateStrategy.Type = appsv1.OnDeleteDaemonSetStrategyType
	in := Input{Now: t0, Devices: zoned(2), DaemonSets: []*appsv1.DaemonSet{agent}}
	in = markReady(apply(in, Schedule(in), t0), t0)
	agent.Spec.Template.Spec.Containers[0].Image = "v2"
	if plan := Schedule(in); len(plan.Create)+len(plan.Deletions) != 0 {
		t.Fatalf("OnDelete acted: %+v", plan)
	}
}

func TestDaemonPodThatDoesNotFitItsDevice(t *testing.T) {
	agent := daemonSet("agent", kv("app=agent"), "", "8Gi")
	plan := Schedule(Input{Now: t0, Devices: zoned(3), DaemonSets: []*appsv1.DaemonSet{agent}})
	if len(plan.Pending) != 3 {
		t.Fatalf("pending %v", plan.Pending)
	}
	want := "0/3 devices are available: 1 Insufficient memory, 2 node(s) didn't satisfy plugin(s) [NodeAffinity]. " +
		"preemption: 0/3 devices are available: 1 No preemption victims found for incoming pod, 2 Preemption is not helpful for scheduling."
	if plan.Pending[0].Message != want {
		t.Errorf("message\n got %q\nwant %q", plan.Pending[0].Message, want)
	}
}

func TestDaemonSetMatchingNoDeviceSaysSo(t *testing.T) {
	agent := daemonSet("agent", kv("app=agent"), "", "")
	agent.Spec.Template.Spec.NodeSelector = map[string]string{"site": "mars"}
	plan := Schedule(Input{Now: t0, Devices: zoned(3), DaemonSets: []*appsv1.DaemonSet{agent}})
	if len(plan.Create) != 0 || len(plan.Events) != 1 || plan.Events[0].Reason != "NoMatchingDevices" ||
		plan.Events[0].Message != "0/3 devices match the DaemonSet's nodeSelector, affinity and tolerations" {
		t.Fatalf("create %d events %+v", len(plan.Create), plan.Events)
	}
}

func TestGeneratedPodNamesStayWithin63Characters(t *testing.T) {
	long := strings.Repeat("a", 80)
	web := deployment(long, 2, kv("app=web"), "", "")
	agent := daemonSet(long, kv("app=agent"), "", "")
	plan := Schedule(Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}, DaemonSets: []*appsv1.DaemonSet{agent}})
	if len(plan.Create) != 4 {
		t.Fatalf("created %d", len(plan.Create))
	}
	for _, p := range plan.Create {
		if len(p.Name) > 63 {
			t.Errorf("pod name %q is %d characters", p.Name, len(p.Name))
		}
	}
}

func TestUnplaceableWorkloadsDisturbNothing(t *testing.T) {
	web := deployment("web", 3, kv("app=web"), "1", "")
	agent := daemonSet("agent", kv("app=agent"), "100m", "")
	in := Input{Now: t0, Devices: zoned(3), Deployments: []*appsv1.Deployment{web}, DaemonSets: []*appsv1.DaemonSet{agent}}
	in = markReady(apply(in, Schedule(in), t0), t0)
	before := len(in.Pods)
	// Too big for any device, a spread no device can meet, a selector
	// that matches nothing: all pending, nothing running is touched.
	huge := deployment("huge", 2, kv("app=huge"), "64", "")
	spread := deployment("spread", 2, kv("app=spread"), "", "")
	spread.Spec.Template.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "rack",
		WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: kv("app=spread")}}}
	nowhere := deployment("nowhere", 1, kv("app=nowhere"), "", "")
	nowhere.Spec.Template.Spec.NodeSelector = map[string]string{"site": "mars"}
	in.Deployments = append(in.Deployments, huge, spread, nowhere)
	plan := Schedule(in)
	if len(plan.Deletions) != 0 || len(plan.Preemptions) != 0 || len(plan.Bindings) != 0 {
		t.Fatalf("deletions %v preemptions %v bindings %v", plan.Deletions, plan.Preemptions, plan.Bindings)
	}
	if len(plan.Pending) != 5 || len(in.Pods) != before {
		t.Fatalf("pending %d, want 5", len(plan.Pending))
	}
	for _, p := range plan.Pending {
		if !strings.HasPrefix(p.Message, "0/3 devices are available: 3 ") {
			t.Errorf("%s: %q", p.Pod, p.Message)
		}
	}
}

func eventsOf(plan Plan, kind, reason string) []string {
	var out []string
	for _, e := range plan.Events {
		if e.Kind == kind && e.Reason == reason {
			out = append(out, e.Name+": "+e.Message)
		}
	}
	return out
}

func TestControllersAndSchedulerRecordEvents(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	agent := daemonSet("agent", kv("app=agent"), "", "")
	in := Input{Now: t0, Devices: zoned(1), Deployments: []*appsv1.Deployment{web}, DaemonSets: []*appsv1.DaemonSet{agent}}
	plan := Schedule(in)
	rs := "web-" + TemplateHash(&web.Spec.Template)
	if got := eventsOf(plan, "Deployment", "ScalingReplicaSet"); len(got) != 1 || got[0] != "web: Scaled up replica set "+rs+" from 0 to 2" {
		t.Errorf("ScalingReplicaSet %q", got)
	}
	if got := eventsOf(plan, "DaemonSet", "SuccessfulCreate"); len(got) != 1 || !strings.HasPrefix(got[0], "agent: Created pod: agent-") {
		t.Errorf("SuccessfulCreate %q", got)
	}
	if got := eventsOf(plan, "Pod", "Scheduled"); len(got) != 3 || !strings.HasSuffix(got[0], " to dev0") {
		t.Errorf("Scheduled %q", got)
	}
	in = apply(in, plan, t0)
	*web.Spec.Replicas = 1
	in.Devices[0].UnreachableSince = t0.Add(-time.Hour)
	plan = Schedule(in)
	if got := eventsOf(plan, "Pod", "TaintManagerEviction"); len(got) != 2 {
		t.Errorf("TaintManagerEviction %q, want both web pods", got)
	}
	if got := eventsOf(plan, "Deployment", "ScalingReplicaSet"); len(got) != 1 || got[0] != "web: Scaled up replica set "+rs+" from 0 to 1" {
		t.Errorf("after the eviction: ScalingReplicaSet %q", got)
	}
	if got := eventsOf(plan, "Pod", "FailedScheduling"); len(got) != 1 || !strings.Contains(got[0], "untolerated taint {node.kubernetes.io/unreachable: }") {
		t.Errorf("FailedScheduling %q", got)
	}
}

// A DaemonSet asks for a pod per device, which no apply-time check can
// bound: past MaxPods its controller is refused as a pod quota refuses
// it, with one FailedCreate event per workload and pass.
func TestControllersStopAtMaxPods(t *testing.T) {
	ds := daemonSet("agent", kv("app=agent"), "10m", "")
	d := deployment("web", 3, kv("app=web"), "10m", "")
	in := Input{Now: t0, Devices: zoned(5), DaemonSets: []*appsv1.DaemonSet{ds}, Deployments: []*appsv1.Deployment{d},
		Pods: []*v1.Pod{pod("solo", "", nil, "10m", "")}, MaxPods: 4}
	plan := Schedule(in)
	if len(plan.Create) != 3 {
		t.Fatalf("created %d pods with 1 held and a bound of 4, want 3", len(plan.Create))
	}
	var refused []string
	for _, e := range plan.Events {
		if e.Reason == "FailedCreate" {
			refused = append(refused, e.Kind+" "+e.Name+": "+e.Message)
		}
	}
	if len(refused) != 2 || !strings.HasPrefix(refused[0], `DaemonSet agent: Error creating: pods "agent-`) ||
		!strings.HasSuffix(refused[0], `" is forbidden: exceeded quota: podhub, requested: pods=1, used: pods=4, limited: pods=4`) ||
		!strings.HasPrefix(refused[1], "Deployment web: Error creating: pods \"web-") {
		t.Fatalf("FailedCreate events %q, want one for the DaemonSet and one for the Deployment", refused)
	}
	// The next pass creates nothing more, and says so again the same way.
	again := Schedule(apply(in, plan, t0.Add(time.Second)))
	if len(again.Create) != 0 {
		t.Errorf("created %d more pods past the bound", len(again.Create))
	}
}

// A workload deleted and applied again between passes has a new UID: its
// old pods are the garbage collector's, not the new workload's.
func TestReappliedWorkloadDoesNotAdoptTheOldPods(t *testing.T) {
	web := deployment("web", 2, kv("app=web"), "", "")
	agent := daemonSet("agent", kv("app=agent"), "", "")
	in := Input{Now: t0, Devices: zoned(2), Deployments: []*appsv1.Deployment{web}, DaemonSets: []*appsv1.DaemonSet{agent}}
	in = apply(in, Schedule(in), t0)
	if len(in.Pods) != 4 {
		t.Fatalf("%d pods, want 4", len(in.Pods))
	}
	old := map[string]bool{}
	for _, p := range in.Pods {
		old[p.Name] = true
	}
	web2, agent2 := web.DeepCopy(), agent.DeepCopy()
	web2.UID, agent2.UID = "uid-web-again", "uid-agent-again"
	in.Deployments, in.DaemonSets = []*appsv1.Deployment{web2}, []*appsv1.DaemonSet{agent2}
	plan := Schedule(in)
	for name := range old {
		if d, ok := deletionOf(plan, name); !ok || d.Reason != ReasonOwnerDeleted {
			t.Errorf("old pod %s: deletion %+v, want %s", name, d, ReasonOwnerDeleted)
		}
	}
	if len(plan.Create) != 4 {
		t.Fatalf("created %d pods, want 4 for the new workloads", len(plan.Create))
	}
	for _, p := range plan.Create {
		if old[p.Name] {
			t.Errorf("new pod %s reuses an old name", p.Name)
		}
	}
	// The same UID again keeps the pods.
	in.Deployments, in.DaemonSets = []*appsv1.Deployment{web}, []*appsv1.DaemonSet{agent}
	if plan := Schedule(in); len(plan.Deletions) != 0 || len(plan.Create) != 0 {
		t.Fatalf("same workloads: %d deletions, %d created", len(plan.Deletions), len(plan.Create))
	}
}
