package uplink

import (
	"sync"
	"time"

	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/sync/protocol"
)

// outboxAge is since when the outbox has held items the hub has not
// stored: the outbox keeps no time per item, so the age of its oldest
// item is told as the time since it was last seen empty (an upper bound,
// exact while the hub stores items in the order they were queued).
type outboxAge struct {
	mu    sync.Mutex
	since time.Time // zero: empty when last looked
}

// added notes items queued at now.
func (o *outboxAge) added(now time.Time) {
	o.mu.Lock()
	if o.since.IsZero() {
		o.since = now
	}
	o.mu.Unlock()
}

// seen records the outbox's depth at now and returns the age.
func (o *outboxAge) seen(rows int, now time.Time) time.Duration {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case rows == 0:
		o.since = time.Time{}
		return 0
	case o.since.IsZero():
		o.since = now
	}
	return now.Sub(o.since)
}

// outboxState reads the outbox's depth and the age of its oldest item.
func (a *Agent) outboxState() (rows int, oldest time.Duration, err error) {
	st, err := a.store.Stats()
	if err != nil {
		return 0, 0, err
	}
	return st.Rows, a.outboxAge.seen(st.Rows, a.now()), nil
}

// MetricsState is the hub link and the outbox as the device's metrics
// show them (podvisor_hub_connected, podvisor_outbox_*).
func (a *Agent) MetricsState() devmetrics.UplinkState {
	l, _ := a.Connection()
	s := devmetrics.UplinkState{Connected: l.Connected}
	if rows, oldest, err := a.outboxState(); err == nil {
		s.OutboxItems, s.OutboxOldest = rows, oldest
	}
	return s
}

// metricsSnapshot is the heartbeat's metrics: the daemon's summary and
// the outbox; nil without a summary, or if it would not validate.
func (a *Agent) metricsSnapshot() *protocol.MetricsSnapshot {
	if a.cfg.MetricsSummary == nil {
		return nil
	}
	s := a.cfg.MetricsSummary()
	m := &protocol.MetricsSnapshot{Since: s.Since, RunningPods: s.RunningPods, RunningContainers: s.RunningContainers,
		Evictions: s.Evictions, Preemptions: s.Preemptions, StartedContainersErrors: s.StartedContainersErrors,
		ContainerRestarts: s.ContainerRestarts, ProbeFailures: s.ProbeFailures,
		PodsCPUSeconds: s.PodsCPUSeconds, PodsMemoryWorkingSet: s.PodsMemoryWorkingSet,
		NodeMemoryWorkingSet: s.NodeMemoryWorkingSet, NodeMemoryAvailable: s.NodeMemoryAvailable, NodeFsAvailable: s.NodeFsAvailable}
	if p := s.Pressure; p != nil {
		m.Pressure = &protocol.PressureSnapshot{CPU: p.CPU, Memory: p.Memory, IO: p.IO}
	}
	if rows, oldest, err := a.outboxState(); err == nil {
		m.OutboxDepth, m.OutboxOldestSecs = rows, oldest.Seconds()
	}
	if err := m.Validate(); err != nil {
		a.log.Warn("metrics left out of the heartbeat", "err", err)
		return nil
	}
	return m
}
