package protocol

import (
	"fmt"
	"math"
)

// MetricsSnapshot is the summary of a device's metrics that rides its
// heartbeat, for the hub to show and re-export with a device label: a
// device behind NAT cannot be scraped. It holds summary series only,
// fixed in number whatever the device runs, so a fleet's re-export stays
// bounded. Counters count since the daemon started (Since, on the
// device's clock, which the hub only shows); the names follow the
// device's /metrics exposition (docs/metrics.md).
type MetricsSnapshot struct {
	// Since is when the counters started (the daemon's start), in Unix
	// seconds on the device's clock.
	Since int64 `json:"since"`

	RunningPods       int `json:"runningPods"`       // kubelet_running_pods
	RunningContainers int `json:"runningContainers"` // kubelet_running_containers{container_state="running"}

	// Counters since Since.
	Evictions               uint64 `json:"evictions"`               // sum of kubelet_evictions
	Preemptions             uint64 `json:"preemptions"`             // sum of kubelet_preemptions
	StartedContainersErrors uint64 `json:"startedContainersErrors"` // kubelet_started_containers_errors_total
	ContainerRestarts       uint64 `json:"containerRestarts"`       // sum of podvisor_container_restarts_total
	ProbeFailures           uint64 `json:"probeFailures"`           // prober_probe_total{result="failed"}

	// Usage of every pod together: cumulative CPU seconds and the
	// memory working set now (pod_cpu_usage_seconds_total,
	// pod_memory_working_set_bytes summed).
	PodsCPUSeconds       float64 `json:"podsCPUSeconds"`
	PodsMemoryWorkingSet uint64  `json:"podsMemoryWorkingSetBytes"`
	NodeMemoryWorkingSet uint64  `json:"nodeMemoryWorkingSetBytes,omitempty"`
	NodeMemoryAvailable  uint64  `json:"nodeMemoryAvailableBytes,omitempty"`
	NodeFsAvailable      uint64  `json:"nodeFsAvailableBytes,omitempty"`

	// Pressure is PSI's avg10 "some" of cpu, memory and io, in percent
	// (0–100); nil on a kernel without PSI.
	Pressure *PressureSnapshot `json:"pressure,omitempty"`

	// The uplink's outbox: status items waiting for the hub's receipt,
	// and the age in seconds of the oldest of them.
	OutboxDepth      int     `json:"outboxDepth"`
	OutboxOldestSecs float64 `json:"outboxOldestSeconds"`
}

// PressureSnapshot is PSI's avg10 of the "some" line, in percent.
type PressureSnapshot struct {
	CPU    float64 `json:"cpu"`
	Memory float64 `json:"memory"`
	IO     float64 `json:"io"`
}

// Bounds a snapshot may claim: a device runs far fewer pods than this,
// and a value past them is a lie the hub refuses rather than graphs.
const (
	maxSnapshotPods       = 1 << 16
	maxSnapshotContainers = 1 << 20
)

// Validate checks a snapshot's values are ones a device can report.
func (m *MetricsSnapshot) Validate() error {
	switch {
	case m.RunningPods < 0 || m.RunningPods > maxSnapshotPods:
		return fmt.Errorf("metrics: runningPods %d out of range [0, %d]", m.RunningPods, maxSnapshotPods)
	case m.RunningContainers < 0 || m.RunningContainers > maxSnapshotContainers:
		return fmt.Errorf("metrics: runningContainers %d out of range [0, %d]", m.RunningContainers, maxSnapshotContainers)
	case m.OutboxDepth < 0:
		return fmt.Errorf("metrics: outboxDepth %d is negative", m.OutboxDepth)
	case !finiteNonNegative(m.PodsCPUSeconds):
		return fmt.Errorf("metrics: podsCPUSeconds %v is not a finite non-negative number", m.PodsCPUSeconds)
	case !finiteNonNegative(m.OutboxOldestSecs):
		return fmt.Errorf("metrics: outboxOldestSeconds %v is not a finite non-negative number", m.OutboxOldestSecs)
	}
	if p := m.Pressure; p != nil {
		for name, v := range map[string]float64{"cpu": p.CPU, "memory": p.Memory, "io": p.IO} {
			if !finiteNonNegative(v) || v > 100 {
				return fmt.Errorf("metrics: pressure.%s %v out of range [0, 100]", name, v)
			}
		}
	}
	return nil
}

func finiteNonNegative(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }
