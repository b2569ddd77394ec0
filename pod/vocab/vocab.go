// Package vocab is the vocabulary every part of podvisor shares about a pod:
// its QoS class, which init containers are sidecars, its priority, the
// names of its container instances, its probe kinds and how an instance
// ended. It sits at the bottom of the import graph: it imports nothing of
// podvisor, so the core, the runtimes, probes and cgroups can all use it.
package vocab

import (
	v1 "k8s.io/api/core/v1"
)

// QOSClass computes the pod's QoS class as the API server does: Guaranteed
// when every container has equal cpu and memory requests and limits,
// BestEffort when none has any, Burstable otherwise.
func QOSClass(p *v1.Pod) v1.PodQOSClass {
	hasAny, guaranteed := false, true
	all := append(append([]v1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...)
	for _, c := range all {
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq || hasLim {
				hasAny = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !hasAny:
		return v1.PodQOSBestEffort
	case guaranteed:
		return v1.PodQOSGuaranteed
	default:
		return v1.PodQOSBurstable
	}
}

// IsSidecar reports whether an init container spec is a sidecar.
func IsSidecar(c *v1.Container) bool {
	return c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways
}

// Priority is a pod's resolved priority (0 when unset).
func Priority(p *v1.Pod) int32 {
	if p.Spec.Priority != nil {
		return *p.Spec.Priority
	}
	return 0
}

// ProbeKind names a probe.
type ProbeKind string

// Probes.
const (
	Startup   ProbeKind = "Startup"
	Liveness  ProbeKind = "Liveness"
	Readiness ProbeKind = "Readiness"
)
