package schedule

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// benchFleet is 10,000 devices in 10 zones, a DaemonSet for all of them
// and a 1,000-replica Deployment spread over the zones (maxSkew 1,
// DoNotSchedule).
func benchFleet() Input {
	in := Input{Now: t0}
	for i := range 10000 {
		in.Devices = append(in.Devices, device(fmt.Sprintf("dev%05d", i), fmt.Sprintf("%s=zone%d", v1.LabelTopologyZone, i%10)))
	}
	web := deployment("web", 1000, kv("app=web"), "100m", "64Mi")
	web.Spec.Template.Spec.TopologySpreadConstraints = []v1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: v1.LabelTopologyZone,
		WhenUnsatisfiable: v1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: kv("app=web")}}}
	in.Deployments = []*appsv1.Deployment{web}
	in.DaemonSets = []*appsv1.DaemonSet{daemonSet("agent", kv("app=agent"), "10m", "16Mi")}
	return in
}

// BenchmarkFleet10k times one pass that places all 11,000 pods from
// nothing: go test -run '^$' -bench Fleet10k ./sync/hub/schedule/
func BenchmarkFleet10k(b *testing.B) {
	in := benchFleet()
	b.ReportAllocs()
	for b.Loop() {
		plan := Schedule(in)
		if len(plan.Bindings) != 11000 {
			b.Fatalf("%d bindings, %d pending, want 11000 placed", len(plan.Bindings), len(plan.Pending))
		}
	}
}

// BenchmarkFleet10kSteady times a pass over the same fleet with every pod
// already placed: the cost of the hub re-running the scheduler.
func BenchmarkFleet10kSteady(b *testing.B) {
	in := benchFleet()
	in = apply(in, Schedule(in), t0)
	b.ReportAllocs()
	for b.Loop() {
		plan := Schedule(in)
		if len(plan.Bindings)+len(plan.Create) != 0 {
			b.Fatalf("steady pass placed %d", len(plan.Bindings))
		}
	}
}

// BenchmarkFleet10kDefaultSpread is the same fleet with a Deployment that
// sets no constraints: the cluster-default spread (hostname 3, zone 5,
// ScheduleAnyway) scores every device for every replica.
func BenchmarkFleet10kDefaultSpread(b *testing.B) {
	in := benchFleet()
	in.Deployments[0].Spec.Template.Spec.TopologySpreadConstraints = nil
	b.ReportAllocs()
	for b.Loop() {
		plan := Schedule(in)
		if len(plan.Bindings) != 11000 {
			b.Fatalf("%d bindings, %d pending, want 11000 placed", len(plan.Bindings), len(plan.Pending))
		}
	}
}

// manyWorkloads is 100 devices, 2,000 two-replica Deployments and 4
// DaemonSets, every pod placed: a fleet of many small workloads.
func manyWorkloads() Input {
	in := Input{Now: t0}
	for i := range 100 {
		d := device(fmt.Sprintf("dev%03d", i), fmt.Sprintf("%s=zone%d", v1.LabelTopologyZone, i%10))
		d.Allocatable = v1.ResourceList{v1.ResourceCPU: resource.MustParse("64"), v1.ResourceMemory: resource.MustParse("64Gi"), v1.ResourcePods: resource.MustParse("1000")}
		in.Devices = append(in.Devices, d)
	}
	for i := range 2000 {
		name := fmt.Sprintf("web%04d", i)
		in.Deployments = append(in.Deployments, deployment(name, 2, kv("app="+name), "1m", "1Mi"))
	}
	for i := range 4 {
		name := fmt.Sprintf("agent%d", i)
		in.DaemonSets = append(in.DaemonSets, daemonSet(name, kv("app="+name), "1m", "1Mi"))
	}
	return apply(in, Schedule(in), t0)
}

// BenchmarkManyWorkloadsSteady times a steady pass over many small
// workloads: go test -run '^$' -bench ManyWorkloads ./sync/hub/schedule/
func BenchmarkManyWorkloadsSteady(b *testing.B) {
	in := manyWorkloads()
	if len(in.Pods) != 4400 {
		b.Fatalf("%d pods, want 4400", len(in.Pods))
	}
	b.ReportAllocs()
	for b.Loop() {
		plan := Schedule(in)
		if len(plan.Bindings)+len(plan.Create)+len(plan.Deletions) != 0 {
			b.Fatalf("steady pass changed %d pods", len(plan.Bindings)+len(plan.Create)+len(plan.Deletions))
		}
	}
}

// BenchmarkPreemptFleet5k: 5,000 full devices of low-priority pods and
// 100 pending high-priority pods, each preempting: the dry run looks at
// a window of 500 devices, not all 5,000.
func BenchmarkPreemptFleet5k(b *testing.B) {
	const n = 5000
	var devices []Device
	var pods []*v1.Pod
	for i := range n {
		name := fmt.Sprintf("d%04d", i)
		devices = append(devices, device(name))
		pods = append(pods, withPriority(pod("low-"+name, name, nil, "4", ""), 10))
	}
	for i := range 100 {
		pods = append(pods, withPriority(pod(fmt.Sprintf("urgent-%d", i), "", nil, "1", ""), 1000))
	}
	in := Input{Now: t0, Devices: devices, Pods: pods}
	b.ResetTimer()
	for range b.N {
		if plan := Schedule(in); len(plan.Preemptions) != 100 {
			b.Fatalf("%d preemptions", len(plan.Preemptions))
		}
	}
}
