package controllers

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// UnreachableSince, which the StatefulSet controller times leases from,
// is on the hub's clock: when the hub last received anything from the
// device, or its own start plus the timeout for a device it has not heard
// since it started; what the device's clock says (its heartbeat's time,
// skewed by hours either way) changes nothing. Fenced follows the fleet.
func TestUnreachableSinceIsTheHubsClock(t *testing.T) {
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	now := t0
	s := New(Config{DeviceTimeout: 30 * time.Second, Now: func() time.Time { return now }}, fleet, workloaddb.New(fleet.SQL()), nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.started = t0.Add(-time.Minute)
	heard := t0.Add(10 * time.Second)
	for id, skew := range map[string]time.Duration{"ahead": 5 * time.Hour, "behind": -7 * time.Hour} {
		if err := fleet.AddDevice(id); err != nil {
			t.Fatal(err)
		}
		fleet.SavePresence(id, &protocol.Presence{Device: id, Online: true}, heard)
		if _, _, err := fleet.SaveHeartbeat(&protocol.Heartbeat{Device: id, Time: heard.Add(skew)}, heard); err != nil {
			t.Fatal(err)
		}
	}
	fleet.AddDevice("never")
	fleet.SetFenced("behind", t0)

	now = t0.Add(5 * time.Minute)
	devs, _, err := s.scheduleDevices(now)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		want := heard
		if d.Name == "never" {
			want = s.started.Add(30 * time.Second) // counted from the hub's start, with a full timeout
		}
		if !d.UnreachableSince.Equal(want) {
			t.Errorf("%s: unreachable since %v, want %v", d.Name, d.UnreachableSince, want)
		}
		if d.Fenced != (d.Name == "behind") {
			t.Errorf("%s: fenced %v", d.Name, d.Fenced)
		}
	}
}
