package protocol

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Bounds on the resources a heartbeat may claim. The kubelet is trusted
// for its node's allocatable, and a device for its own; but an overstated
// allocatable draws replicas onto the device, so the hub accepts only
// what a small device can plausibly have: well above any real one, far
// below what would take a whole fleet's pods.
var maxResource = map[v1.ResourceName]resource.Quantity{
	v1.ResourceCPU:              resource.MustParse("1024"),
	v1.ResourceMemory:           resource.MustParse("64Ti"),
	v1.ResourceEphemeralStorage: resource.MustParse("64Pi"),
	v1.ResourcePods:             resource.MustParse("1024"),
}

// Bounds for what maxResource does not name: hugepages share memory's,
// every other (extended) resource counts devices of a kind.
var (
	maxHugePages = resource.MustParse("64Ti")
	maxExtended  = resource.MustParse("1M")
)

// MaxNodeResources bounds how many resources capacity or allocatable names.
const MaxNodeResources = 64

// validateNodeResources checks a heartbeat's capacity and allocatable: no
// negative amount, none above its bound, allocatable never above
// capacity, nor naming what capacity does not (the kubelet's allocatable
// is capacity less reservations).
// The error names the field.
func validateNodeResources(n *v1.NodeStatus) error {
	for _, l := range []struct {
		field string
		list  v1.ResourceList
	}{{"node.capacity", n.Capacity}, {"node.allocatable", n.Allocatable}} {
		if len(l.list) > MaxNodeResources {
			return fmt.Errorf("%s: %d resources, over the limit of %d", l.field, len(l.list), MaxNodeResources)
		}
		for _, name := range slices.Sorted(maps.Keys(l.list)) {
			q := l.list[name]
			switch bound := resourceBound(name); {
			case q.Sign() < 0:
				return fmt.Errorf("%s.%.64s %s: negative", l.field, name, q.String())
			case q.Cmp(bound) > 0:
				return fmt.Errorf("%s.%.64s %s: over the bound of %s", l.field, name, q.String(), bound.String())
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(n.Allocatable)) {
		c, ok := n.Capacity[name]
		if !ok {
			return fmt.Errorf("node.allocatable.%.64s: not in node.capacity", name)
		}
		if a := n.Allocatable[name]; a.Cmp(c) > 0 {
			return fmt.Errorf("node.allocatable.%.64s %s: over node.capacity.%.64s %s", name, a.String(), name, c.String())
		}
	}
	return nil
}

func resourceBound(name v1.ResourceName) resource.Quantity {
	if b, ok := maxResource[name]; ok {
		return b
	}
	if strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
		return maxHugePages
	}
	return maxExtended
}
