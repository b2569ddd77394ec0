package hub_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// A broker that lost both copies of a device's new desired document (the
// retained one and the one queued in its session, as NATS 2.9 does while
// its cluster elects new leaders): when the device comes back online
// without having answered it, the hub publishes it again.
func TestDeviceCaughtUpWhenTheBrokerLostItsDocument(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	db := filepath.Join(r.dir, "device.db")
	_, _, halt := r.device("gw-1", db, pods)
	if _, err := r.hub.Apply("gw-1", []json.RawMessage{podJSON("web")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "generation 1 acked", func() bool {
		a, _ := r.fleet.LastAck("gw-1")
		return a != nil && a.Generation == 1
	})
	halt()
	if _, err := r.hub.Apply("gw-1", []json.RawMessage{podJSON("web"), podJSON("db")}); err != nil {
		t.Fatal(err)
	}
	// The broker loses generation 2: the device's session goes (a clean
	// session under its client ID) and the retained copy is cleared.
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtt://" + r.addr).SetClientID("gw-1").SetCleanSession(true))
	if tok := c.Connect(); !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		t.Fatalf("connect: %v", tok.Error())
	}
	c.Publish(protocol.Topics{}.Device("gw-1", protocol.KindDesired), 1, true, []byte{}).WaitTimeout(5 * time.Second)
	c.Disconnect(100)

	again := &fakePods{}
	_, _, halt2 := r.deviceWith("gw-1", db, again, nil)
	defer halt2()
	eventually(t, 10*time.Second, "generation 2 applied after coming online", func() bool { g, _, _ := again.state(); return g == 2 })
}
