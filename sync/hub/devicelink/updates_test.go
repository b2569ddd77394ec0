package devicelink

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Orders are signed, stored before they are published, retained on the
// device's update topic with IDs that grow; the chunk server's check
// allows only the transfer hashes of the device's current order, and
// nothing once the order is withdrawn.
func TestOrdersAndWhatTheChunkServerMaySend(t *testing.T) {
	f := testFleet(t, "d1", "d2")
	pub, key, _ := ed25519.GenerateKey(nil)
	type publish struct {
		topic   string
		payload []byte
	}
	var published []publish
	client := &recordingClient{}
	client.onPublish = func(topic string, payload []byte) { published = append(published, publish{topic, payload}) }
	h := New(Config{Broker: "test", Key: key, ReleaseDir: t.TempDir(), Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }},
		f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer h.chunks.Close() // the recording client has no connection to close
	gz := protocol.Artifact{Name: "podvisor", Arch: "arm64", Size: 100, SHA256: fmt.Sprintf("%064x", 1), Encoding: "gzip", WireSize: 50, WireSHA256: fmt.Sprintf("%064x", 2)}
	plain := protocol.Artifact{Name: "podvisor-shim", Arch: "arm64", Size: 10, SHA256: fmt.Sprintf("%064x", 3)}
	manifest, err := protocol.SignRelease(protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.2.0", Artifacts: []protocol.Artifact{gz, plain}}, key)
	if err != nil {
		t.Fatal(err)
	}
	for want := int64(1); want <= 2; want++ {
		id, err := h.Order("d1", "u1", manifest, false)
		if err != nil || id != want {
			t.Fatalf("order %d: id %d, %v", want, id, err)
		}
	}
	if len(published) != 2 || published[1].topic != (protocol.Topics{}).Device("d1", protocol.KindUpdate) {
		t.Fatalf("published %v", published)
	}
	o, err := protocol.OpenOrder(published[1].payload, "d1", pub)
	if err != nil || o.ID != 2 || !bytes.Equal(o.Release, manifest) {
		t.Fatalf("the order: %+v, %v", o, err)
	}
	if stored, _ := f.DeviceOrder("d1"); !bytes.Equal(stored.Document, published[1].payload) || stored.Update != "u1" {
		t.Fatal("the published order is not the stored one")
	}
	// The transfer hashes: the gzip artifact's wire hash, the plain one's hash.
	if path, size, err := h.Resolve("d1", 2, gz.WireSHA256); err != nil || size != 50 || !strings.HasSuffix(path, gz.WireSHA256) {
		t.Fatalf("resolve the encoded artifact: %s %d %v", path, size, err)
	}
	if _, size, err := h.Resolve("d1", 2, plain.SHA256); err != nil || size != 10 {
		t.Fatalf("resolve the plain artifact: %d %v", size, err)
	}
	for _, c := range []struct {
		dev   string
		order int64
		sha   string
		want  string
	}{
		{"d1", 2, gz.SHA256, "not an artifact"}, // the decoded hash is not what travels
		{"d1", 1, plain.SHA256, "not this device's current order (2)"},
		{"d2", 2, plain.SHA256, "not this device's current order (0)"},
	} {
		if _, _, err := h.Resolve(c.dev, c.order, c.sha); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("resolve %s order %d %s: %v, want %q", c.dev, c.order, c.sha[:8], err, c.want)
		}
	}
	if err := h.Withdraw("d1"); err != nil {
		t.Fatal(err)
	}
	if o, err := protocol.OpenOrder(published[2].payload, "d1", pub); err != nil || o.ID != 3 || len(o.Release) != 0 {
		t.Fatalf("the withdrawal: %+v, %v", o, err)
	}
	if _, _, err := h.Resolve("d1", 3, plain.SHA256); err == nil {
		t.Fatal("an artifact resolved after the order was withdrawn")
	}
	// A reconnect publishes every stored order again.
	published = nil
	if n := h.publishOrders(client); n != 1 || len(published) != 1 || published[0].topic != (protocol.Topics{}).Device("d1", protocol.KindUpdate) {
		t.Fatalf("republished %d: %v", n, published)
	}
}

// The chunk server's cache of a device's order is filled from fleet.db
// on the first fetch; an order made (or withdrawn) between that read and
// the cache's fill must not leave the older order cached: the device
// could then go on reading the withdrawn release, and the new order's
// fetches would be refused until the next order.
func TestChunkCacheIsNotFilledWithAnOrderReplacedMeanwhile(t *testing.T) {
	f := testFleet(t, "d1")
	_, key, _ := ed25519.GenerateKey(nil)
	client := &recordingClient{}
	client.onPublish = func(string, []byte) {}
	h := New(Config{Broker: "test", Key: key, ReleaseDir: t.TempDir(), Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }},
		f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer h.chunks.Close()
	plain := protocol.Artifact{Name: "podvisor", Arch: "arm64", Size: 10, SHA256: fmt.Sprintf("%064x", 3)}
	manifest, err := protocol.SignRelease(protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.2.0", Artifacts: []protocol.Artifact{plain}}, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Order("d1", "u1", manifest, false); err != nil {
		t.Fatal(err)
	}
	// The withdrawal lands after the first fetch read order 1, before it
	// cached it.
	withdrawn := false
	afterOrderRead = func() {
		if !withdrawn {
			withdrawn = true
			if err := h.Withdraw("d1"); err != nil {
				t.Error(err)
			}
		}
	}
	defer func() { afterOrderRead = func() {} }()
	h.Resolve("d1", 1, plain.SHA256) // this one races with the withdrawal either way
	if !withdrawn {
		t.Fatal("the hook did not run")
	}
	if _, _, err := h.Resolve("d1", 1, plain.SHA256); err == nil {
		t.Fatal("order 1's artifact still resolves after its withdrawal: the cache kept the order read before it")
	}
}

// qosClient records the QoS of each publish by topic.
type qosClient struct {
	mqtt.Client
	qos map[string]byte
}

func (c *qosClient) Publish(topic string, qos byte, _ bool, _ interface{}) mqtt.Token {
	c.qos[topic] = qos
	return doneToken{}
}

// Chunks go out at QoS 0. At QoS 1 the hub's MQTT client keeps every
// frame (up to 128 KiB) until the broker acknowledges it: a broker that
// never does, forging fetches of every device meanwhile, would grow the
// hub's memory without bound. A chunk lost is asked for again by the
// device after its timeout, as the protocol already does.
func TestChunksAreSentAtQoS0(t *testing.T) {
	f := testFleet(t, "d1")
	_, key, _ := ed25519.GenerateKey(nil)
	client := &qosClient{qos: map[string]byte{}}
	h := New(Config{Broker: "test", Key: key, ReleaseDir: t.TempDir(), Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }},
		f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer h.chunks.Close()
	h.sendChunk("d1", protocol.EncodeChunk(protocol.Chunk{Order: 1, SHA256: fmt.Sprintf("%064x", 1)}, []byte("bytes")))
	topic := (protocol.Topics{}).Device("d1", protocol.KindChunk)
	if qos, ok := client.qos[topic]; !ok || qos != 0 {
		t.Fatalf("chunk published at QoS %d (published: %v), want 0", qos, ok)
	}
}
