package schedule

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// resources is a resource list in the scheduler's integer units: milli-CPU
// and bytes, as the scheduler's framework.Resource holds them.
type resources struct {
	milliCPU, memory, ephemeral int64
	scalar                      map[v1.ResourceName]int64
}

// The scheduler's non-zero defaults for scoring a pod that requests
// nothing (pkg/scheduler/util: DefaultMilliCPURequest, DefaultMemoryRequest).
const (
	defaultMilliCPURequest = 100
	defaultMemoryRequest   = 200 * 1024 * 1024
)

func toResources(list v1.ResourceList) resources {
	var r resources
	for name, q := range list {
		switch name {
		case v1.ResourceCPU:
			r.milliCPU = q.MilliValue()
		case v1.ResourceMemory:
			r.memory = q.Value()
		case v1.ResourceEphemeralStorage:
			r.ephemeral = q.Value()
		case v1.ResourcePods:
		default:
			if r.scalar == nil {
				r.scalar = map[v1.ResourceName]int64{}
			}
			r.scalar[name] = q.Value()
		}
	}
	return r
}

func (r *resources) add(o resources, sign int64) {
	r.milliCPU += sign * o.milliCPU
	r.memory += sign * o.memory
	r.ephemeral += sign * o.ephemeral
	for n, v := range o.scalar {
		if r.scalar == nil {
			r.scalar = map[v1.ResourceName]int64{}
		}
		r.scalar[n] += sign * v
	}
}

// podRequests is what the scheduler counts for a pod: containers, init
// containers (sidecars included) and overhead, as the API defines it.
func podRequests(p *v1.Pod) resources {
	return toResources(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
}

// insufficient lists the resources the pod asks for more of than the node
// has left, in the scheduler's words ("Insufficient cpu", "Too many pods").
func insufficient(req resources, alloc resources, maxPods int64, used resources, podsOnNode int) []string {
	var out []string
	if int64(podsOnNode)+1 > maxPods {
		out = append(out, "Too many pods")
	}
	if req.milliCPU > 0 && req.milliCPU > alloc.milliCPU-used.milliCPU {
		out = append(out, "Insufficient cpu")
	}
	if req.memory > 0 && req.memory > alloc.memory-used.memory {
		out = append(out, "Insufficient memory")
	}
	if req.ephemeral > 0 && req.ephemeral > alloc.ephemeral-used.ephemeral {
		out = append(out, "Insufficient ephemeral-storage")
	}
	names := make([]string, 0, len(req.scalar))
	for n := range req.scalar {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		want := req.scalar[v1.ResourceName(n)]
		if want > 0 && want > alloc.scalar[v1.ResourceName(n)]-used.scalar[v1.ResourceName(n)] {
			out = append(out, "Insufficient "+n)
		}
	}
	return out
}
