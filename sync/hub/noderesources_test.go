package hub_test

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podvisor/podvisor/sync/protocol"
)

// A device that overstates its allocatable to draw replicas has its
// heartbeat refused, with an event of the device naming the field; the
// node status stored before stays.
func TestOverstatedAllocatableRefused(t *testing.T) {
	r := newRig(t)
	if err := r.fleet.AddDevice("gw-a"); err != nil {
		t.Fatal(err)
	}
	c := r.rogue("rogue-alloc")
	topic := protocol.Topics{}.Device("gw-a", protocol.KindHeartbeat)
	node := func(alloc string) v1.NodeStatus {
		return v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4")},
			Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse(alloc)}}
	}
	eventually(t, 10*time.Second, "gw-a's node status at the hub", func() bool {
		publish(t, c, topic, false, protocol.Encode(&protocol.Heartbeat{Device: "gw-a", Time: time.Now(), Node: node("3")}))
		time.Sleep(20 * time.Millisecond)
		d, _ := r.fleet.GetDevice("gw-a", time.Now(), time.Minute)
		return d.Node != nil && d.Node.Allocatable.Cpu().Value() == 3
	})
	publish(t, c, topic, false, protocol.Encode(&protocol.Heartbeat{Device: "gw-a", Time: time.Now(), Node: node("64")}))
	eventually(t, 10*time.Second, "the overstated heartbeat refused with an event", func() bool {
		evs, _ := r.fleet.Events("gw-a")
		for _, e := range evs {
			if e.Reason == "MessageRejected" && strings.Contains(e.Message, "gw-a") &&
				strings.Contains(e.Message, "node.allocatable.cpu 64: over node.capacity.cpu 4") {
				return true
			}
		}
		return false
	})
	if d, _ := r.fleet.GetDevice("gw-a", time.Now(), time.Minute); d.Node == nil || d.Node.Allocatable.Cpu().Value() != 3 {
		t.Fatalf("stored node status changed to %+v", d.Node)
	}
}
