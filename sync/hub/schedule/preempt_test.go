package schedule

import (
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func started(p *v1.Pod, at time.Duration) *v1.Pod {
	ts := metav1.NewTime(t0.Add(at))
	p.Status.StartTime = &ts
	return p
}

func TestPreemptionTakesFewestLowestPriorityVictims(t *testing.T) {
	pods := []*v1.Pod{
		started(withPriority(pod("keep-high", "a", nil, "2", ""), 10), 0),
		started(withPriority(pod("low-old", "a", nil, "1", ""), 5), 0),
		started(withPriority(pod("low-new", "a", nil, "1", ""), 5), time.Minute),
		withPriority(pod("urgent", "", nil, "2", ""), 1000),
	}
	in := Input{Now: t0, Devices: []Device{device("a")}, Pods: pods}
	plan := Schedule(in)
	p := mustPend(t, plan, "urgent")
	if p.NominatedNodeName != "a" {
		t.Fatalf("nominated %q, want a", p.NominatedNodeName)
	}
	// Reprieve goes most important first: keep-high (10) is kept with
	// urgent's 2 CPUs; neither low pod fits beside them. (Evicting
	// keep-high alone would be fewer pods, but the scheduler protects the
	// higher priority first.)
	want := []Preemption{{Pod: ref("urgent"), Device: "a", Victims: []types.NamespacedName{ref("low-old"), ref("low-new")}}}
	if len(plan.Preemptions) != 1 {
		t.Fatalf("preemptions %v", plan.Preemptions)
	}
	if !reflect.DeepEqual(plan.Preemptions, want) {
		t.Errorf("preemptions %v, want %v", plan.Preemptions, want)
	}
	for _, v := range []string{"low-old", "low-new"} {
		if d, ok := deletionOf(plan, v); !ok || d.Reason != ReasonPreempted {
			t.Errorf("%s: deletion %+v", v, d)
		}
	}
	if _, ok := deletionOf(plan, "keep-high"); ok {
		t.Error("keep-high was preempted")
	}

	// Next pass, victims still terminating: still pending on a, no new victims.
	in = apply(in, plan, t0.Add(time.Second))
	plan = Schedule(in)
	if p := mustPend(t, plan, "urgent"); p.NominatedNodeName != "a" || len(plan.Deletions) != 0 {
		t.Fatalf("while victims terminate: pending %+v deletions %v", p, plan.Deletions)
	}
	// Victims gone: bound to its nominated device.
	in = removeTerminating(apply(in, plan, t0.Add(2*time.Second)))
	mustBind(t, Schedule(in), "urgent", "a")
}

func TestPreemptionKeepsWhatStillFits(t *testing.T) {
	pods := []*v1.Pod{
		started(withPriority(pod("l1", "a", nil, "1", ""), 0), 0),
		started(withPriority(pod("l2", "a", nil, "1", ""), 0), time.Second),
		started(withPriority(pod("l3", "a", nil, "2", ""), 0), 2*time.Second),
		withPriority(pod("urgent", "", nil, "2", ""), 1000),
	}
	plan := Schedule(Input{Now: t0, Devices: []Device{device("a")}, Pods: pods})
	if len(plan.Preemptions) != 1 || !reflect.DeepEqual(plan.Preemptions[0].Victims, []types.NamespacedName{ref("l3")}) {
		t.Fatalf("preemptions %v, want only l3", plan.Preemptions)
	}
}

func TestPreemptionPolicyNever(t *testing.T) {
	never := v1.PreemptNever
	p := withPriority(pod("polite", "", nil, "4", ""), 1000)
	p.Spec.PreemptionPolicy = &never
	plan := Schedule(Input{Now: t0, Devices: []Device{device("a")}, Pods: []*v1.Pod{pod("low", "a", nil, "1", ""), p}})
	got := mustPend(t, plan, "polite")
	if want := "0/1 devices are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."; got.Message != want {
		t.Errorf("got %q, want %q", got.Message, want)
	}
	if len(plan.Deletions) != 0 || got.NominatedNodeName != "" {
		t.Errorf("deletions %v nominated %q", plan.Deletions, got.NominatedNodeName)
	}
}

func TestPreemptionNeverEvictsEqualOrHigherPriority(t *testing.T) {
	plan := Schedule(Input{Now: t0, Devices: []Device{device("a")}, Pods: []*v1.Pod{
		withPriority(pod("same", "a", nil, "4", ""), 100), withPriority(pod("p", "", nil, "1", ""), 100)}})
	got := mustPend(t, plan, "p")
	if !strings.HasSuffix(got.Message, "preemption: 0/1 devices are available: 1 No preemption victims found for incoming pod.") || len(plan.Deletions) != 0 {
		t.Errorf("got %q, deletions %v", got.Message, plan.Deletions)
	}
}

func TestPreemptionPrefersVictimsWithinTheirBudget(t *testing.T) {
	devs := []Device{device("a"), device("b")}
	pods := func() []*v1.Pod {
		return []*v1.Pod{pod("db", "a", kv("app=db"), "4", ""), pod("web", "b", kv("app=web"), "4", ""),
			withPriority(pod("urgent", "", nil, "1", ""), 1000)}
	}
	// Without budgets every criterion ties: the first device by name.
	plan := Schedule(Input{Now: t0, Devices: devs, Pods: pods()})
	if len(plan.Preemptions) != 1 || plan.Preemptions[0].Device != "a" {
		t.Fatalf("preemptions %v, want on a", plan.Preemptions)
	}
	// db's budget allows no disruption: preempt web on b instead.
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "db"},
		Spec:   policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: kv("app=db")}},
		Status: policyv1.PodDisruptionBudgetStatus{DisruptionsAllowed: 0}}
	plan = Schedule(Input{Now: t0, Devices: devs, Pods: pods(), PDBs: []*policyv1.PodDisruptionBudget{pdb}})
	if len(plan.Preemptions) != 1 || plan.Preemptions[0].Device != "b" ||
		!reflect.DeepEqual(plan.Preemptions[0].Victims, []types.NamespacedName{ref("web")}) {
		t.Fatalf("preemptions %v, want web on b", plan.Preemptions)
	}
}

func TestPreemptionIsNotTriedWhereItCannotHelp(t *testing.T) {
	d := device("a")
	d.Taints = []v1.Taint{{Key: "k", Effect: v1.TaintEffectNoSchedule}}
	plan := Schedule(Input{Now: t0, Devices: []Device{d}, Pods: []*v1.Pod{pod("low", "a", nil, "4", ""),
		withPriority(pod("urgent", "", nil, "1", ""), 1000)}})
	got := mustPend(t, plan, "urgent")
	if want := "0/1 devices are available: 1 node(s) had untolerated taint {k: }. preemption: 0/1 devices are available: 1 Preemption is not helpful for scheduling."; got.Message != want {
		t.Errorf("got %q, want %q", got.Message, want)
	}
}

func TestPriorityClassesOrderTheQueue(t *testing.T) {
	// One slot; the pod of the higher class gets it though it came later.
	classes := PriorityClassesForTest()
	early := pod("early", "", nil, "3", "")
	early.Spec.PriorityClassName = "low"
	late := pod("late", "", nil, "3", "")
	late.Spec.PriorityClassName = "high"
	late.CreationTimestamp = metav1.NewTime(t0.Add(time.Minute))
	plan := Schedule(Input{Now: t0, Devices: []Device{device("a")}, Pods: []*v1.Pod{early, late}, PriorityClasses: classes})
	mustBind(t, plan, "late", "a")
	mustPend(t, plan, "early")
}

// For random devices filled with pods of random size and priority, a
// pending pod of random priority either preempts or says why not; when it
// preempts, every victim has a lower priority, the pod fits once the
// victims are gone, and no single victim could have been spared.
func TestPreemptionIsMinimalOnRandomDevices(t *testing.T) {
	preempted := 0
	for seed := int64(1); seed <= 300; seed++ {
		r := rand.New(rand.NewSource(seed))
		var devs []Device
		var pods []*v1.Pod
		for d := range 1 + r.Intn(3) {
			name := fmt.Sprintf("d%d", d)
			devs = append(devs, device(name))
			for i := range 1 + r.Intn(6) {
				p := pod(fmt.Sprintf("%s-p%d", name, i), name, kv("app=x"), fmt.Sprintf("%dm", 100+r.Intn(1400)), fmt.Sprintf("%dMi", 64+r.Intn(1400)))
				pods = append(pods, started(withPriority(p, int32(r.Intn(5)*10)), time.Duration(r.Intn(100))*time.Second))
			}
		}
		want := withPriority(pod("urgent", "", nil, fmt.Sprintf("%dm", 500+r.Intn(3000)), fmt.Sprintf("%dMi", 256+r.Intn(3000))), int32(r.Intn(6)*10))
		plan := Schedule(Input{Now: t0, Devices: devs, Pods: append(pods, want)})
		if bindingOf(plan, "urgent") != "" {
			continue
		}
		pending := mustPend(t, plan, "urgent")
		if len(plan.Preemptions) == 0 {
			if !strings.Contains(pending.Message, "preemption: ") || len(plan.Deletions) != 0 {
				t.Fatalf("seed %d: no preemption, message %q, deletions %v", seed, pending.Message, plan.Deletions)
			}
			continue
		}
		preempted++
		pre := plan.Preemptions[0]
		victims := map[string]bool{}
		for _, v := range pre.Victims {
			victims[v.Name] = true
		}
		var cpu, mem int64
		for _, p := range pods {
			if p.Spec.NodeName != pre.Device || victims[p.Name] {
				continue
			}
			cpu += p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
			mem += p.Spec.Containers[0].Resources.Requests.Memory().Value()
		}
		needCPU := want.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
		needMem := want.Spec.Containers[0].Resources.Requests.Memory().Value()
		allocCPU, allocMem := int64(4000), int64(4<<30)
		if cpu+needCPU > allocCPU || mem+needMem > allocMem {
			t.Fatalf("seed %d: urgent does not fit on %s after its victims", seed, pre.Device)
		}
		for _, p := range pods {
			if !victims[p.Name] {
				continue
			}
			if *p.Spec.Priority >= *want.Spec.Priority || p.Spec.NodeName != pre.Device {
				t.Fatalf("seed %d: victim %s (priority %d on %s) for urgent (priority %d) on %s", seed, p.Name, *p.Spec.Priority, p.Spec.NodeName, *want.Spec.Priority, pre.Device)
			}
			vc := p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue()
			vm := p.Spec.Containers[0].Resources.Requests.Memory().Value()
			if cpu+vc+needCPU <= allocCPU && mem+vm+needMem <= allocMem {
				t.Fatalf("seed %d: victim %s could have been spared", seed, p.Name)
			}
		}
		if d, ok := deletionOf(plan, pre.Victims[0].Name); !ok || d.Reason != ReasonPreempted || pending.NominatedNodeName != pre.Device {
			t.Fatalf("seed %d: deletion %+v nominated %q", seed, d, pending.NominatedNodeName)
		}
	}
	if preempted < 20 {
		t.Fatalf("only %d of 300 random fleets preempted", preempted)
	}
}

// In a large fleet the dry run stops after DefaultPreemption's number of
// candidates (10% of the devices, at least 100), from an offset drawn
// from the pod's name: a better device outside that window is not
// looked at, and the cost does not grow devices × victims.
func TestPreemptionLooksAtAWindowOfALargeFleet(t *testing.T) {
	const n = 1000
	offset, enough := candidateWindow(ref("urgent"), n)
	if enough != 100 {
		t.Fatalf("%d candidates wanted of %d devices, want 100", enough, n)
	}
	if _, e := candidateWindow(ref("urgent"), 5000); e != 500 {
		t.Fatalf("%d candidates wanted of 5000 devices, want 10%%", e)
	}
	if _, e := candidateWindow(ref("urgent"), 40); e != 40 {
		t.Fatalf("%d candidates wanted of 40 devices, want all", e)
	}
	outside := (offset + n/2) % n
	var devices []Device
	var pods []*v1.Pod
	for i := range n {
		name := fmt.Sprintf("d%04d", i)
		devices = append(devices, device(name))
		prio := int32(10)
		if i == outside {
			prio = 5 // the best victim of all
		}
		pods = append(pods, withPriority(pod("low-"+name, name, nil, "4", ""), prio))
	}
	pods = append(pods, withPriority(pod("urgent", "", nil, "1", ""), 1000))
	plan := Schedule(Input{Now: t0, Devices: devices, Pods: pods})
	if len(plan.Preemptions) != 1 {
		t.Fatalf("preemptions %v", plan.Preemptions)
	}
	var at int
	fmt.Sscanf(plan.Preemptions[0].Device, "d%04d", &at)
	if dist := (at - offset + n) % n; dist >= enough {
		t.Fatalf("nominated %s, %d devices past the offset %d: outside the window of %d (the best victim is on d%04d)",
			plan.Preemptions[0].Device, dist, offset, enough, outside)
	}
}
