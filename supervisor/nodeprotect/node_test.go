package nodeprotect

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Allocatable is capacity less the reservations and the hard eviction
// thresholds, never below zero.
func TestAllocatable(t *testing.T) {
	p, _, _ := protector(t, Options{Memory: 1000, Node: NodeConfig{
		MaxPods:          10,
		SystemReserved:   v1.ResourceList{v1.ResourceMemory: resource.MustParse("100"), v1.ResourcePods: resource.MustParse("20")},
		PodvisorReserved: v1.ResourceList{v1.ResourceMemory: resource.MustParse("50")},
		EvictionHard:     map[string]string{"memory.available": "10%"},
	}})
	a := p.Allocatable()
	if m := a[v1.ResourceMemory]; m.Value() != 750 {
		t.Errorf("memory %s, want 1000-100-50-10%%=750", m.String())
	}
	if n := a[v1.ResourcePods]; !n.IsZero() {
		t.Errorf("pods %s, want 0: more reserved than there is", n.String())
	}
}

// The node is the device with its labels, addresses and version; a
// drained node is cordoned.
func TestNodeView(t *testing.T) {
	p, _, _ := protector(t, Options{Memory: 1000, NodeName: "dev", HostIP: "10.0.0.2", Node: NodeConfig{Version: "v1.2"}})
	n := p.NodeView(map[string]string{"note": "x"})
	if n.Name != "dev" || n.Labels["kubernetes.io/hostname"] != "dev" || n.Annotations["note"] != "x" {
		t.Errorf("node %s labels %v annotations %v", n.Name, n.Labels, n.Annotations)
	}
	if n.Status.NodeInfo.KubeletVersion != "podvisor v1.2" || n.Status.Addresses[1].Address != "10.0.0.2" {
		t.Errorf("version %q addresses %v", n.Status.NodeInfo.KubeletVersion, n.Status.Addresses)
	}
	if m := n.Status.Capacity[v1.ResourceMemory]; m.Value() != 1000 {
		t.Errorf("memory capacity %s", m.String())
	}
	if n.Spec.Unschedulable {
		t.Error("unschedulable without a drain")
	}
	p.Drain("test", fakePods{})
	n = p.NodeView(nil)
	if !n.Spec.Unschedulable || len(n.Spec.Taints) != 1 || n.Spec.Taints[0].Key != v1.TaintNodeUnschedulable {
		t.Errorf("drained node spec %+v, want cordoned", n.Spec)
	}
}

// The downward API tells containers the node's name and host IP, and the
// allocatable resources as read once by ReadAllocatable, not at each call.
func TestPodEnv(t *testing.T) {
	p, _, _ := protector(t, Options{Memory: 1000, NodeName: "dev", HostIP: "10.0.0.2", Node: NodeConfig{MaxPods: 10}})
	if env := p.PodEnv(); env.NodeName != "dev" || env.HostIP != "10.0.0.2" || env.Allocatable != nil {
		t.Fatalf("before ReadAllocatable: %+v, want the name, the IP and no allocatable yet", env)
	}
	p.ReadAllocatable()
	env := p.PodEnv()
	if m := env.Allocatable[v1.ResourceMemory]; m.Value() != 1000 {
		t.Errorf("allocatable memory %s, want 1000", m.String())
	}
	if n := env.Allocatable[v1.ResourcePods]; n.Value() != 10 {
		t.Errorf("allocatable pods %s, want 10", n.String())
	}
}
