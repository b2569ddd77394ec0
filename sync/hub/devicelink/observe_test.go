package devicelink

import (
	"crypto/ed25519"
	"errors"
	"io"
	"log/slog"
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"
)

// countingObserver counts what the link tells it.
type countingObserver struct {
	items, heartbeats int
	refused, notOwned map[string]int
}

func (o *countingObserver) StatusItemsStored(n int)     { o.items += n }
func (o *countingObserver) HeartbeatStored()            { o.heartbeats++ }
func (o *countingObserver) MessageRefused(kind string)  { o.refused[kind]++ }
func (o *countingObserver) MessageNotOwned(kind string) { o.notOwned[kind]++ }

// message is a received MQTT message in these tests.
type message struct {
	mqtt.Message
	topic   string
	payload []byte
}

func (m message) Topic() string   { return m.topic }
func (m message) Payload() []byte { return m.payload }

// The link tells its observer of each status item and heartbeat it
// stores and of each message it refuses, by the topic's kind; a batch
// sent again adds no items.
func TestLinkTellsItsObserver(t *testing.T) {
	f := testFleet(t, "dev")
	_, key, _ := ed25519.GenerateKey(nil)
	obs := &countingObserver{refused: map[string]int{}}
	client := &recordingClient{onPublish: func(string, []byte) {}}
	h := New(Config{Broker: "test", Key: key, Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }, Observe: obs},
		f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	b := &protocol.StatusBatch{Device: "dev", Epoch: "e1", Items: []protocol.StatusItem{
		{Seq: 1, Key: "default/a", Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "default"}}},
		{Seq: 2, Key: "default/b", Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "default"}}},
	}}
	for range 2 {
		if err := h.saveStatus("dev", b); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.saveHeartbeat("dev", &protocol.Heartbeat{Device: "dev"}); err != nil {
		t.Fatal(err)
	}
	h.reject("dev", message{topic: h.topics.Device("dev", protocol.KindHeartbeat)}, errors.New("test"))
	// Through the handler: a payload naming another device.
	report(h, "heartbeat", protocol.DecodeHeartbeat, func(hb *protocol.Heartbeat) string { return hb.Device }, h.saveHeartbeat)(nil,
		message{topic: h.topics.Device("dev", protocol.KindHeartbeat), payload: protocol.Encode(&protocol.Heartbeat{Device: "other"})})
	if obs.items != 2 || obs.heartbeats != 1 || obs.refused[protocol.KindHeartbeat] != 2 || len(obs.refused) != 1 {
		t.Fatalf("observer told %d items, %d heartbeats, refused %v; want 2, 1 and 2 heartbeats", obs.items, obs.heartbeats, obs.refused)
	}
}

// A link without an observer stores as before.
func TestLinkWithoutObserver(t *testing.T) {
	f := testFleet(t, "dev")
	_, key, _ := ed25519.GenerateKey(nil)
	client := &recordingClient{onPublish: func(string, []byte) {}}
	h := New(Config{Broker: "test", Key: key, Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }},
		f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err := h.saveHeartbeat("dev", &protocol.Heartbeat{Device: "dev"}); err != nil {
		t.Fatal(err)
	}
	h.reject("dev", message{topic: "not/a/topic"}, errors.New("test"))
}
