package hub_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/uplink"
)

// countingPods is a daemon that counts its pods' traffic: it has Stats,
// as *supervisor.Daemon does.
type countingPods struct{ fakePods }

func (*countingPods) Stats() ([]api.PodStats, error) {
	return []api.PodStats{
		{Namespace: "default", Name: "web", Net: &api.NetStats{Source: "veth", RxBytes: 5000, RxPackets: 5, TxBytes: 700, TxPackets: 7}},
		{Namespace: "default", Name: "quiet"}, // not counted
	}, nil
}

// A device whose daemon counts traffic carries the summary in its
// heartbeat, and the hub shows it.
func TestDeviceHeartbeatCarriesNetSummary(t *testing.T) {
	r := newRig(t)
	r.deviceWith("gw-s", filepath.Join(r.dir, "device.db"), &countingPods{}, func(c *uplink.Config) { c.Heartbeat = 100 * time.Millisecond })
	eventually(t, 10*time.Second, "gw-s's network summary at the hub", func() bool {
		d, _ := r.fleet.GetDevice("gw-s", time.Now(), time.Minute)
		return d.Net != nil && d.Net.Counted == 1 && len(d.Net.Pods) == 1 && d.Net.Pods[0].Key == "default/web" &&
			d.Net.Total == protocol.NetCounters{RxBytes: 5000, RxPackets: 5, TxBytes: 700, TxPackets: 7}
	})
}

// A heartbeat's network summary is shown with the device; a forged one
// out of bounds (too many pods, a pod above the total, a bad key) is
// refused whole, with an event naming the field, and the summary stored
// before stays.
func TestHeartbeatNetSummaryShownAndBounded(t *testing.T) {
	r := newRig(t)
	// Enrolled, not running: its own heartbeats (no summary) would replace the test's.
	if err := r.fleet.AddDevice("gw-n"); err != nil {
		t.Fatal(err)
	}
	c := r.rogue("rogue-net")
	topic := protocol.Topics{}.Device("gw-n", protocol.KindHeartbeat)
	good := &protocol.NetSummary{Counted: 1, Total: protocol.NetCounters{RxBytes: 8 << 20, RxPackets: 100, TxBytes: 4 << 20, TxPackets: 90},
		Pods: []protocol.PodNet{{Key: "default/talker", Source: "ebpf-cgroup-skb",
			NetCounters: protocol.NetCounters{RxBytes: 8 << 20, RxPackets: 100, TxBytes: 4 << 20, TxPackets: 90}}}}
	eventually(t, 10*time.Second, "gw-n's network summary at the hub", func() bool {
		// Again each time: the hub may not have subscribed yet.
		publish(t, c, topic, false, protocol.Encode(&protocol.Heartbeat{Device: "gw-n", Time: time.Now(), Net: good}))
		time.Sleep(20 * time.Millisecond)
		d, _ := r.fleet.GetDevice("gw-n", time.Now(), time.Minute)
		return d.Net != nil && d.Net.Total == good.Total && len(d.Net.Pods) == 1 && d.Net.Pods[0].Key == "default/talker"
	})

	flood := &protocol.NetSummary{Counted: 1000, Total: good.Total}
	for i := range 1000 {
		flood.Pods = append(flood.Pods, protocol.PodNet{Key: fmt.Sprintf("default/p%d", i), Source: "veth"})
	}
	above := &protocol.NetSummary{Counted: 1, Pods: good.Pods}
	for _, bad := range []*protocol.NetSummary{flood, above} {
		publish(t, c, topic, false, protocol.Encode(&protocol.Heartbeat{Device: "gw-n", Time: time.Now(), Net: bad}))
	}
	eventually(t, 10*time.Second, "both forged summaries refused with an event", func() bool {
		evs, _ := r.fleet.Events("gw-n")
		n := 0
		for _, e := range evs {
			if e.Reason == "MessageRejected" && (strings.Contains(e.Message, "net.pods: 1000 pods") || strings.Contains(e.Message, "above net.total")) {
				n++
			}
		}
		return n == 2
	})
	d, _ := r.fleet.GetDevice("gw-n", time.Now(), time.Minute)
	if d.Net == nil || d.Net.Total != good.Total || len(d.Net.Pods) != 1 {
		t.Fatalf("the stored summary changed to %+v", d.Net)
	}
}
