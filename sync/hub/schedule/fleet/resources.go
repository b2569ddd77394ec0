package fleet

import (
	"sort"

	v1 "k8s.io/api/core/v1"
	resourcehelper "k8s.io/component-helpers/resource"
)

// Resources is a resource list in the scheduler's integer units: milli-CPU
// and bytes, as the scheduler's framework.Resource holds them.
type Resources struct {
	MilliCPU, Memory, Ephemeral int64
	Scalar                      map[v1.ResourceName]int64
}

// The scheduler's non-zero defaults for scoring a pod that requests
// nothing (pkg/scheduler/util: DefaultMilliCPURequest, DefaultMemoryRequest).
const (
	defaultMilliCPURequest = 100
	defaultMemoryRequest   = 200 * 1024 * 1024
)

// ToResources is a resource list in the scheduler's units.
func ToResources(list v1.ResourceList) Resources {
	var r Resources
	for name, q := range list {
		switch name {
		case v1.ResourceCPU:
			r.MilliCPU = q.MilliValue()
		case v1.ResourceMemory:
			r.Memory = q.Value()
		case v1.ResourceEphemeralStorage:
			r.Ephemeral = q.Value()
		case v1.ResourcePods:
		default:
			if r.Scalar == nil {
				r.Scalar = map[v1.ResourceName]int64{}
			}
			r.Scalar[name] = q.Value()
		}
	}
	return r
}

// Add adds (sign 1) or subtracts (-1) o.
func (r *Resources) Add(o Resources, sign int64) {
	r.MilliCPU += sign * o.MilliCPU
	r.Memory += sign * o.Memory
	r.Ephemeral += sign * o.Ephemeral
	for n, v := range o.Scalar {
		if r.Scalar == nil {
			r.Scalar = map[v1.ResourceName]int64{}
		}
		r.Scalar[n] += sign * v
	}
}

// PodRequests is what the scheduler counts for a pod: containers, init
// containers (sidecars included) and overhead, as the API defines it.
func PodRequests(p *v1.Pod) Resources {
	return ToResources(resourcehelper.PodRequests(p, resourcehelper.PodResourcesOptions{}))
}

// Insufficient lists the Resources the pod asks for more of than the node
// has left, in the scheduler's words ("Insufficient cpu", "Too many pods").
func Insufficient(req Resources, alloc Resources, maxPods int64, used Resources, podsOnNode int) []string {
	var out []string
	if int64(podsOnNode)+1 > maxPods {
		out = append(out, "Too many pods")
	}
	if req.MilliCPU > 0 && req.MilliCPU > alloc.MilliCPU-used.MilliCPU {
		out = append(out, "Insufficient cpu")
	}
	if req.Memory > 0 && req.Memory > alloc.Memory-used.Memory {
		out = append(out, "Insufficient memory")
	}
	if req.Ephemeral > 0 && req.Ephemeral > alloc.Ephemeral-used.Ephemeral {
		out = append(out, "Insufficient ephemeral-storage")
	}
	names := make([]string, 0, len(req.Scalar))
	for n := range req.Scalar {
		names = append(names, string(n))
	}
	sort.Strings(names)
	for _, n := range names {
		want := req.Scalar[v1.ResourceName(n)]
		if want > 0 && want > alloc.Scalar[v1.ResourceName(n)]-used.Scalar[v1.ResourceName(n)] {
			out = append(out, "Insufficient "+n)
		}
	}
	return out
}

// Clone is a copy of r that shares no map with it.
func (r Resources) Clone() Resources {
	out := r
	if r.Scalar != nil {
		out.Scalar = make(map[v1.ResourceName]int64, len(r.Scalar))
		for k, v := range r.Scalar {
			out.Scalar[k] = v
		}
	}
	return out
}

// NonZero is a pod's CPU and memory for scoring, with the scheduler's
// defaults for a pod that requests none.
func (r Resources) NonZero() (cpu, mem int64) {
	cpu, mem = r.MilliCPU, r.Memory
	if cpu == 0 {
		cpu = defaultMilliCPURequest
	}
	if mem == 0 {
		mem = defaultMemoryRequest
	}
	return cpu, mem
}
