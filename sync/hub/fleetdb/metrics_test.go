package fleetdb

import (
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"

	"github.com/podvisor/podvisor/test/pgtest"
)

// A heartbeat's metrics snapshot is the device's newest until the next
// heartbeat, which may carry none; each heartbeat tells the fleet's
// readers the device's node changed.
func TestHeartbeatKeepsTheNewestMetricsSnapshot(t *testing.T) {
	pgtest.EachStore(t, testHeartbeatKeepsTheNewestMetricsSnapshot)
}

func testHeartbeatKeepsTheNewestMetricsSnapshot(t *testing.T) {
	f := testFleet(t, "a")
	sub := f.Changes().Subscribe()
	defer sub.Close()
	at := time.Unix(1700000000, 0)
	snap := &protocol.MetricsSnapshot{RunningPods: 3, RunningContainers: 5, Evictions: 1, OutboxDepth: 2,
		Pressure: &protocol.PressureSnapshot{Memory: 1.5}}
	if _, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: "a", Metrics: snap}, at); err != nil {
		t.Fatal(err)
	}
	d, err := f.GetDevice("a", at, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d.Metrics == nil || d.Metrics.RunningPods != 3 || d.Metrics.Pressure == nil || d.Metrics.Pressure.Memory != 1.5 {
		t.Fatalf("device's metrics %+v, want the heartbeat's snapshot", d.Metrics)
	}
	if got := sub.Take(); len(got) != 1 || got[0] != (fleetwatch.Change{Device: "a", What: fleetwatch.Node}) {
		t.Fatalf("changes published %v, want the device's node once", got)
	}
	if _, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: "a"}, at.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	if d, _ = f.GetDevice("a", at, time.Minute); d.Metrics != nil {
		t.Fatalf("a heartbeat without a snapshot left %+v", d.Metrics)
	}
}
