package replicas

import (
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/natstest"
)

// A replica that gains devices subscribes again to a filter its session
// has and counts on the broker sending the retained messages again
// (MQTT 3.1.1 §3.8.4). NATS 2.9 does, as a hub's client under a
// replica's client ID (podhub:<id>), over its persistent session.
func TestNATSResubscribeSendsRetainedAgain(t *testing.T) {
	data := filepath.Join(t.TempDir(), "hub")
	if out, err := exec.Command(podhub, "--data-dir", data, "init").CombinedOutput(); err != nil {
		t.Fatalf("podhub init: %v\n%s", err, out)
	}
	c := natstest.Start(t, filepath.Join(data, "pki"), "", []string{"dev-1"})
	hubTLS, err := natstest.HubTLS(filepath.Join(data, "pki"))
	if err != nil {
		t.Fatal(err)
	}
	topics := protocol.Topics{}
	cl := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(c.URLs()[0]).SetClientID("podhub:r1").SetTLSConfig(hubTLS).
		SetCleanSession(false).SetProtocolVersion(4).SetAutoReconnect(false).SetConnectTimeout(10 * time.Second))
	if tok := cl.Connect(); !tok.WaitTimeout(20*time.Second) || tok.Error() != nil {
		t.Fatalf("connecting as podhub:r1: %v", tok.Error())
	}
	defer func() {
		cl.Disconnect(100)
		// End the session (clean session), as a stopping replica does.
		end := mqtt.NewClient(mqtt.NewClientOptions().AddBroker(c.URLs()[0]).SetClientID("podhub:r1").SetTLSConfig(hubTLS).
			SetCleanSession(true).SetProtocolVersion(4).SetAutoReconnect(false))
		if tok := end.Connect(); tok.WaitTimeout(10*time.Second) && tok.Error() == nil {
			end.Disconnect(100)
		}
	}()
	topic := topics.Device("dev-1", protocol.KindAck)
	if tok := cl.Publish(topic, 1, true, []byte("retained-ack")); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("publishing a retained message: %v", tok.Error())
	}
	var retained atomic.Int32
	handler := func(_ mqtt.Client, m mqtt.Message) {
		if m.Retained() && string(m.Payload()) == "retained-ack" {
			retained.Add(1)
		}
	}
	wait := func(n int32, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for retained.Load() < n {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d retained deliveries within 10s, want %d", what, retained.Load(), n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	filter := topics.All(protocol.KindAck)
	for i := range int32(2) {
		if tok := cl.Subscribe(filter, 1, handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribing to %s: %v", filter, tok.Error())
		}
		wait(i+1, "subscription "+string(rune('1'+i)))
	}
	time.Sleep(500 * time.Millisecond)
	if n := retained.Load(); n != 2 {
		t.Fatalf("%d retained deliveries after two subscriptions, want 2", n)
	}
}
