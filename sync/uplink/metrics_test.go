package uplink

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
)

// The heartbeat's metrics are the daemon's summary with the outbox's
// depth and age, and the hub's decoder takes them.
func TestHeartbeatMetricsSnapshot(t *testing.T) {
	st, err := store.Open(filepath.Join(t.TempDir(), "state.db"), store.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	clock := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	a := &Agent{store: st, now: func() time.Time { return clock }, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if a.metricsSnapshot() != nil {
		t.Fatal("a snapshot without a summary to send")
	}
	summary := devmetrics.Summary{Since: clock.Unix() - 60, RunningPods: 3, RunningContainers: 4, Evictions: 1, ProbeFailures: 2,
		PodsCPUSeconds: 1.5, PodsMemoryWorkingSet: 10 << 20, Pressure: &devmetrics.PressureSummary{CPU: 1, Memory: 2, IO: 3}}
	a.cfg.MetricsSummary = func() devmetrics.Summary { return summary }

	m := a.metricsSnapshot()
	if m == nil || m.RunningPods != 3 || m.Evictions != 1 || m.Pressure.IO != 3 || m.OutboxDepth != 0 || m.OutboxOldestSecs != 0 {
		t.Fatalf("snapshot %+v", m)
	}
	if err := a.Publish([]store.Item{{Key: "default/web", Kind: "pod", Payload: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	clock = clock.Add(42 * time.Second)
	m = a.metricsSnapshot()
	if m.OutboxDepth != 1 || m.OutboxOldestSecs != 42 {
		t.Errorf("outbox %d items, oldest %vs: want 1 and 42", m.OutboxDepth, m.OutboxOldestSecs)
	}
	if s := a.MetricsState(); s.OutboxItems != 1 || s.OutboxOldest != 42*time.Second || s.Connected {
		t.Errorf("metrics state %+v", s)
	}
	hb, err := protocol.DecodeHeartbeat(protocol.Encode(&protocol.Heartbeat{Device: "d", Metrics: m}))
	if err != nil || hb.Metrics == nil || hb.Metrics.PodsMemoryWorkingSet != 10<<20 {
		t.Fatalf("the hub's decoder: %+v %v", hb, err)
	}
	// A summary the hub would refuse is left out, not the heartbeat.
	summary.PodsCPUSeconds = -1
	if m := a.metricsSnapshot(); m != nil {
		t.Errorf("an invalid summary sent: %+v", m)
	}
}
