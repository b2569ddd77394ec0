package admission

import (
	"sort"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
)

func pod(name string, qos v1.PodQOSClass, prio int32, cpu, mem string) Pod {
	r := v1.ResourceList{}
	if cpu != "" {
		r[v1.ResourceCPU] = resource.MustParse(cpu)
	}
	if mem != "" {
		r[v1.ResourceMemory] = resource.MustParse(mem)
	}
	return Pod{UID: types.UID(name), Name: name, Requests: r, Priority: prio, QoS: qos}
}

var node = Node{Allocatable: v1.ResourceList{
	v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"), v1.ResourcePods: resource.MustParse("4"),
}}

func victims(d Decision) string {
	var v []string
	for _, u := range d.Victims {
		v = append(v, string(u))
	}
	sort.Strings(v)
	return strings.Join(v, ",")
}

func TestFitAndReasons(t *testing.T) {
	running := []Pod{pod("a", v1.PodQOSBurstable, 0, "1", "512Mi")}
	if d := Admit(pod("b", v1.PodQOSBurstable, 0, "500m", "256Mi"), running, node); !d.Admit || len(d.Victims) != 0 {
		t.Fatalf("fits: %+v", d)
	}
	d := Admit(pod("c", v1.PodQOSBurstable, 0, "100m", "600Mi"), running, node)
	if d.Admit || d.Reason != "OutOfmemory" || !strings.Contains(d.Message, "Insufficient memory") {
		t.Fatalf("memory: %+v", d)
	}
	d = Admit(pod("d", v1.PodQOSBurstable, 0, "1500m", "1Mi"), running, node)
	if d.Admit || d.Reason != "OutOfcpu" {
		t.Fatalf("cpu: %+v", d)
	}
	four := []Pod{pod("1", v1.PodQOSBestEffort, 0, "", ""), pod("2", v1.PodQOSBestEffort, 0, "", ""),
		pod("3", v1.PodQOSBestEffort, 0, "", ""), pod("4", v1.PodQOSBestEffort, 0, "", "")}
	if d := Admit(pod("5", v1.PodQOSBestEffort, 0, "", ""), four, node); d.Admit || d.Reason != "OutOfpods" {
		t.Fatalf("pods: %+v", d)
	}
}

func TestPreemptionPrefersBestEffortAndFewest(t *testing.T) {
	running := []Pod{
		pod("guaranteed", v1.PodQOSGuaranteed, 0, "500m", "400Mi"),
		pod("burstable", v1.PodQOSBurstable, 0, "500m", "300Mi"),
		pod("besteffort-small", v1.PodQOSBestEffort, 0, "", ""),
		pod("besteffort-big", v1.PodQOSBestEffort, 0, "", "300Mi"),
	}
	// 1Gi allocatable, 1000Mi used: a 300Mi pod needs about 276Mi freed.
	d := Admit(pod("important", v1.PodQOSBurstable, 1000, "100m", "300Mi"), running, node)
	if !d.Admit || victims(d) != "besteffort-big" {
		t.Fatalf("want only the big BestEffort pod preempted: %+v", d)
	}
	if d.Resource != v1.ResourceMemory {
		t.Errorf("preempting for %q, want memory (kubelet_preemptions' signal)", d.Resource)
	}
	// Needing more than BestEffort frees takes the Burstable one too, not the Guaranteed one.
	d = Admit(pod("bigger", v1.PodQOSBurstable, 1000, "100m", "600Mi"), running, node)
	if !d.Admit || victims(d) != "besteffort-big,burstable" {
		t.Fatalf("want BestEffort then Burstable: %+v", d)
	}
}

func TestPreemptionRules(t *testing.T) {
	running := []Pod{pod("peer", v1.PodQOSBurstable, 1000, "1", "900Mi"), pod("critical", v1.PodQOSBestEffort, 2000000000, "", "")}
	if d := Admit(pod("same", v1.PodQOSBurstable, 1000, "100m", "500Mi"), running, node); d.Admit {
		t.Fatalf("equal priority must not preempt: %+v", d)
	}
	never := pod("polite", v1.PodQOSBurstable, 5000, "100m", "500Mi")
	never.PreemptNever = true
	if d := Admit(never, running, node); d.Admit || !strings.Contains(d.Message, "Never") {
		t.Fatalf("preemptionPolicy Never: %+v", d)
	}
	if d := Admit(pod("boss", v1.PodQOSBurstable, 5000, "100m", "500Mi"), running, node); !d.Admit || victims(d) != "peer" {
		t.Fatalf("higher priority preempts, never the critical pod: %+v", d)
	}
	crit := pod("crit2", v1.PodQOSBurstable, 2000001000, "100m", "2Gi")
	if d := Admit(crit, running, node); d.Admit {
		t.Fatalf("what cannot be freed cannot be admitted, even for a critical pod: %+v", d)
	}
}

func TestPressureAdmission(t *testing.T) {
	mem := Node{Allocatable: node.Allocatable, Pressure: map[v1.NodeConditionType]bool{v1.NodeMemoryPressure: true}}
	if d := Admit(pod("be", v1.PodQOSBestEffort, 0, "", ""), nil, mem); d.Admit || d.Reason != "Evicted" || !strings.Contains(d.Message, "MemoryPressure") {
		t.Fatalf("BestEffort under memory pressure: %+v", d)
	}
	tolerant := pod("be-tolerant", v1.PodQOSBestEffort, 0, "", "")
	tolerant.Tolerations = []v1.Toleration{{Key: v1.TaintNodeMemoryPressure, Operator: v1.TolerationOpExists, Effect: v1.TaintEffectNoSchedule}}
	if d := Admit(tolerant, nil, mem); !d.Admit {
		t.Fatalf("a BestEffort pod tolerating the taint is admitted: %+v", d)
	}
	if d := Admit(pod("bu", v1.PodQOSBurstable, 0, "100m", "1Mi"), nil, mem); !d.Admit {
		t.Fatalf("Burstable under memory pressure only: %+v", d)
	}
	disk := Node{Allocatable: node.Allocatable, Pressure: map[v1.NodeConditionType]bool{v1.NodeDiskPressure: true}}
	if d := Admit(pod("bu", v1.PodQOSBurstable, 0, "100m", "1Mi"), nil, disk); d.Admit {
		t.Fatalf("disk pressure refuses non-critical pods: %+v", d)
	}
	if d := Admit(pod("crit", v1.PodQOSBestEffort, 2000001000, "", ""), nil, disk); !d.Admit {
		t.Fatalf("critical pods are always admitted: %+v", d)
	}
}
