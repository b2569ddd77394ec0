// Package resources turns pod requests and limits into cgroup settings and
// OOM scores the way the kubelet does, and adds up what a pod needs.
package resources

import (
	"math"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podvisor/podvisor/pod/vocab"
)

// Kubelet constants (pkg/kubelet/cm/helpers_linux.go, pkg/kubelet/qos).
const (
	MinShares     = 2
	MaxShares     = 262144
	SharesPerCPU  = 1024
	QuotaPeriod   = 100000 // µs
	MinQuota      = 1000   // µs
	GuaranteedOOM = -997
	BestEffortOOM = 1000
	// Burstable scores are clamped to [3, 999] as the code does (the docs
	// say 2).
	minBurstableOOM = 1000 + GuaranteedOOM
	maxBurstableOOM = 999
	// SystemNodeCritical is the priority of system-node-critical, whose pods
	// get the Guaranteed score whatever their QoS.
	SystemNodeCritical = 2000001000
)

// CPUShares converts a CPU request in millicores to cgroup v1 shares.
func CPUShares(milliCPU int64) uint64 {
	if milliCPU == 0 {
		return MinShares
	}
	shares := milliCPU * SharesPerCPU / 1000
	return uint64(min(max(shares, MinShares), MaxShares))
}

// CPUWeight converts cgroup v1 shares to a cgroup v2 cpu.weight with the
// formula the OCI runtimes (runc, crun, containerd/cgroups) use: it maps
// 2→1, 1024→100 (the v2 default, so a 1-CPU request weighs like an
// unconfigured cgroup) and 262144→10000. The kubelet's older linear formula
// (KEP-2254) maps 1024 to 39; using one formula for pod and container
// cgroups keeps their weights consistent.
func CPUWeight(shares uint64) uint64 {
	if shares == 0 {
		return 0
	}
	if shares <= MinShares {
		return 1
	}
	if shares >= MaxShares {
		return 10000
	}
	l := math.Log2(float64(shares))
	exponent := (l*l+125*l)/612.0 - 7.0/34.0
	return uint64(math.Ceil(math.Pow(10, exponent)))
}

// CPUQuota converts a CPU limit in millicores to a quota per QuotaPeriod.
func CPUQuota(milliCPU int64) int64 {
	if milliCPU == 0 {
		return 0
	}
	return max(milliCPU*QuotaPeriod/1000, MinQuota)
}

// Limits is what one cgroup (pod or container) is given. Zero means "not
// set": no quota, no memory limit, no pids limit.
type Limits struct {
	CPUShares   uint64 // v1 cpu.shares; v2 cpu.weight = CPUWeight(CPUShares)
	CPUQuota    int64  // µs per QuotaPeriod
	MemoryMax   int64  // bytes
	MemoryLow   int64  // bytes protected from reclaim (v2 memory.low)
	PidsMax     int64
	OOMScoreAdj int
}

// ContainerLimits is the cgroup of one container: shares from its CPU
// request, quota and memory limit from its limits, memory.low from its
// memory request when it has a limit (Guaranteed-like protection).
func ContainerLimits(c *v1.Container) Limits {
	l := Limits{CPUShares: CPUShares(c.Resources.Requests.Cpu().MilliValue())}
	if q, ok := c.Resources.Limits[v1.ResourceCPU]; ok {
		l.CPUQuota = CPUQuota(q.MilliValue())
	}
	if q, ok := c.Resources.Limits[v1.ResourceMemory]; ok {
		l.MemoryMax = q.Value()
	}
	if q, ok := c.Resources.Requests[v1.ResourceMemory]; ok && l.MemoryMax > 0 {
		l.MemoryLow = q.Value()
	}
	return l
}

// PodLimits is the pod-level cgroup, as the kubelet sets it: Guaranteed
// pods get shares, quota and a memory limit; Burstable pods get quota or a
// memory limit only when every container sets that limit; BestEffort pods
// get the minimum shares.
func PodLimits(p *v1.Pod, pidsPerPod int64) Limits {
	qos := vocab.QOSClass(p)
	req := PodRequests(p)
	l := Limits{CPUShares: CPUShares(req.Cpu().MilliValue()), PidsMax: pidsPerPod}
	if qos == v1.PodQOSBestEffort {
		l.CPUShares = MinShares
		return l
	}
	cpuLimit, cpuAll := sumLimit(p, v1.ResourceCPU)
	memLimit, memAll := sumLimit(p, v1.ResourceMemory)
	if cpuAll {
		l.CPUQuota = CPUQuota(cpuLimit.MilliValue())
	}
	if memAll {
		l.MemoryMax = memLimit.Value()
	}
	return l
}

// sumLimit adds a limit over the app containers and sidecars, and reports
// whether every one of them sets it.
func sumLimit(p *v1.Pod, name v1.ResourceName) (resource.Quantity, bool) {
	var total resource.Quantity
	for _, c := range longRunning(p) {
		q, ok := c.Resources.Limits[name]
		if !ok {
			return total, false
		}
		total.Add(q)
	}
	return total, true
}

func longRunning(p *v1.Pod) []v1.Container {
	var out []v1.Container
	for _, c := range p.Spec.InitContainers {
		if vocab.IsSidecar(&c) {
			out = append(out, c)
		}
	}
	return append(out, p.Spec.Containers...)
}

// PodRequests is what a pod needs from the node, as the scheduler counts
// it: the larger of what its app containers and sidecars need together and
// what its heaviest init step needs (an init container plus the sidecars
// started before it), plus the pod overhead.
func PodRequests(p *v1.Pod) v1.ResourceList {
	reqs := v1.ResourceList{}
	for _, c := range p.Spec.Containers {
		addList(reqs, c.Resources.Requests)
	}
	sidecars := v1.ResourceList{}
	initPeak := v1.ResourceList{}
	for _, c := range p.Spec.InitContainers {
		step := v1.ResourceList{}
		if vocab.IsSidecar(&c) {
			addList(reqs, c.Resources.Requests)
			addList(sidecars, c.Resources.Requests)
			addList(step, sidecars)
		} else {
			addList(step, c.Resources.Requests)
			addList(step, sidecars)
		}
		maxList(initPeak, step)
	}
	maxList(reqs, initPeak)
	addList(reqs, p.Spec.Overhead)
	return reqs
}

func addList(into, from v1.ResourceList) {
	for k, v := range from {
		q := into[k]
		q.Add(v)
		into[k] = q
	}
}

func maxList(into, from v1.ResourceList) {
	for k, v := range from {
		if q, ok := into[k]; !ok || v.Cmp(q) > 0 {
			into[k] = v.DeepCopy()
		}
	}
}

// OOMScoreAdj is the kubelet's oom_score_adj for a container of the pod:
// Guaranteed and system-node-critical pods -997, BestEffort 1000,
// Burstable 1000 - 1000*memoryRequest/capacity clamped to [3, 999]. A
// sidecar scores no higher than the app container with the smallest memory
// request, so it is not killed before the app it serves.
func OOMScoreAdj(p *v1.Pod, c *v1.Container, memoryCapacity int64) int {
	if p.Spec.Priority != nil && *p.Spec.Priority >= SystemNodeCritical {
		return GuaranteedOOM
	}
	switch vocab.QOSClass(p) {
	case v1.PodQOSGuaranteed:
		return GuaranteedOOM
	case v1.PodQOSBestEffort:
		return BestEffortOOM
	}
	score := burstableScore(c, memoryCapacity)
	if vocab.IsSidecar(c) {
		for i := range p.Spec.Containers {
			score = min(score, burstableScore(&p.Spec.Containers[i], memoryCapacity))
		}
	}
	return score
}

func burstableScore(c *v1.Container, capacity int64) int {
	if capacity <= 0 {
		return maxBurstableOOM
	}
	req := c.Resources.Requests.Memory().Value()
	score := 1000 - int(1000*req/capacity)
	return min(max(score, minBurstableOOM), maxBurstableOOM)
}
