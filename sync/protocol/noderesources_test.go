package protocol

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func resources(pairs ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(pairs); i += 2 {
		l[v1.ResourceName(pairs[i])] = resource.MustParse(pairs[i+1])
	}
	return l
}

func nodeHeartbeat(capacity, allocatable v1.ResourceList) []byte {
	return Encode(&Heartbeat{Device: "gw-1", Node: v1.NodeStatus{Capacity: capacity, Allocatable: allocatable}})
}

// A device's own capacity and allocatable are accepted when they are
// what a kubelet reports: allocatable at most capacity, within bounds.
func TestHeartbeatNodeResourcesAccepted(t *testing.T) {
	capacity := resources("cpu", "4", "memory", "4Gi", "pods", "110", "ephemeral-storage", "30Gi", "hugepages-2Mi", "0", "example.com/dongle", "2")
	alloc := resources("cpu", "3500m", "memory", "3Gi", "pods", "110", "ephemeral-storage", "27Gi", "hugepages-2Mi", "0", "example.com/dongle", "2")
	h, err := DecodeHeartbeat(nodeHeartbeat(capacity, alloc))
	if err != nil {
		t.Fatal(err)
	}
	if q := h.Node.Allocatable[v1.ResourceCPU]; q.MilliValue() != 3500 {
		t.Fatalf("allocatable cpu %s", q.String())
	}
	// An older heartbeat with no resources at all is still one.
	if _, err := DecodeHeartbeat(nodeHeartbeat(nil, nil)); err != nil {
		t.Fatal(err)
	}
}

// An overstated, negative or unbounded claim refuses the heartbeat, and
// the error names the field.
func TestHeartbeatNodeResourcesAttacks(t *testing.T) {
	many := v1.ResourceList{}
	for i := range MaxNodeResources + 1 {
		many[v1.ResourceName("example.com/r"+strings.Repeat("x", i))] = resource.MustParse("1")
	}
	for _, tc := range []struct {
		name        string
		capacity    v1.ResourceList
		allocatable v1.ResourceList
		want        string
	}{
		{"allocatable over capacity", resources("cpu", "4"), resources("cpu", "64"), "node.allocatable.cpu 64: over node.capacity.cpu 4"},
		{"allocatable without capacity", resources("cpu", "4"), resources("cpu", "4", "memory", "1Gi"), "node.allocatable.memory: not in node.capacity"},
		{"negative allocatable", resources("memory", "1Gi"), resources("memory", "-1"), "node.allocatable.memory -1: negative"},
		{"negative capacity", resources("cpu", "-4"), nil, "node.capacity.cpu -4: negative"},
		{"cpu over bound", resources("cpu", "100k"), resources("cpu", "100k"), "node.capacity.cpu 100k: over the bound of 1024"},
		{"pods over bound", resources("pods", "100000"), resources("pods", "100000"), "node.capacity.pods 100k: over the bound of 1024"},
		{"memory over bound", resources("memory", "1Ei"), resources("memory", "1Gi"), "node.capacity.memory 1Ei: over the bound of 64Ti"},
		{"hugepages over bound", resources("hugepages-1Gi", "1Ei"), nil, "node.capacity.hugepages-1Gi 1Ei: over the bound"},
		{"extended over bound", resources("example.com/dongle", "1G"), nil, "node.capacity.example.com/dongle 1G: over the bound of 1M"},
		{"too many resources", many, nil, "node.capacity: 65 resources, over the limit of 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeHeartbeat(nodeHeartbeat(tc.capacity, tc.allocatable))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
		})
	}
}
