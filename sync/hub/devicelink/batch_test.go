package devicelink

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// recordingClient is the hub's broker client in these tests: it records
// what the hub publishes, and checks each publish with onPublish.
type recordingClient struct {
	mqtt.Client
	onPublish func(topic string, payload []byte)
}

func (c *recordingClient) Publish(topic string, _ byte, _ bool, payload interface{}) mqtt.Token {
	c.onPublish(topic, payload.([]byte))
	return doneToken{}
}

func testFleet(t *testing.T, devices ...string) *fleetdb.Fleet {
	t.Helper()
	f, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for _, d := range devices {
		if err := f.AddDevice(d); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func testPod(name, image string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},"spec":{"containers":[{"name":"app","image":%q}]}}`, name, image))
}

// An apply to many devices stores their documents a batch per
// transaction and publishes each only once it is stored, in the
// devices' order; a second apply replaces the pod by name.
func TestApplyToStoresBeforePublishing(t *testing.T) {
	var devices []string
	for i := range 2*storeBatch + 3 { // three batches
		devices = append(devices, fmt.Sprintf("dev-%04d", i))
	}
	f := testFleet(t, devices...)
	pub, key, _ := ed25519.GenerateKey(nil)
	var published []string
	var checkErr error
	client := &recordingClient{}
	h := New(Config{Broker: "test", Key: key, Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }}, f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	client.onPublish = func(topic string, payload []byte) {
		dev, kind, err := h.topics.Parse(topic)
		if err != nil || kind != protocol.KindDesired {
			checkErr = fmt.Errorf("published on %s (%v)", topic, err)
			return
		}
		stored, err := f.Desired(dev)
		if err != nil || !bytes.Equal(stored.Document, payload) {
			checkErr = fmt.Errorf("device %s: published a document not stored (stored generation %d, %v)", dev, stored.Generation, err)
		}
		if _, err := protocol.OpenDesired(payload, dev, pub, false); err != nil {
			checkErr = fmt.Errorf("device %s: %v", dev, err)
		}
		published = append(published, dev)
	}
	for round, image := range []string{"web:1", "web:2"} {
		published = published[:0]
		gens, err := h.ApplyTo(devices, []json.RawMessage{testPod("web", image)})
		if err != nil || checkErr != nil {
			t.Fatalf("round %d: %v; %v", round, err, checkErr)
		}
		if len(gens) != len(devices) || fmt.Sprint(published) != fmt.Sprint(devices) {
			t.Fatalf("round %d: %d generations; published in order %v, want %v", round, len(gens), published, devices)
		}
		for i, g := range gens {
			if g != int64(round+1) {
				t.Fatalf("round %d: device %s at generation %d", round, devices[i], g)
			}
		}
	}
	d, _ := f.Desired(devices[len(devices)-1])
	if len(d.Pods) != 1 || !bytes.Contains(d.Pods[0], []byte("web:2")) {
		t.Fatalf("after two applies of web: %s", d.Pods)
	}
}

// The first device whose document cannot be made stops the apply: the
// devices before it are stored and published, none after it.
func TestApplyToStopsAtTheFirstBadDevice(t *testing.T) {
	f := testFleet(t, "a", "b", "c")
	_, key, _ := ed25519.GenerateKey(nil)
	var published []string
	client := &recordingClient{onPublish: func(topic string, _ []byte) { published = append(published, topic) }}
	h := New(Config{Broker: "test", Key: key, Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }}, f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	gens, err := h.ApplyTo([]string{"a", "b", "no/such id", "c"}, []json.RawMessage{testPod("web", "web:1")})
	if err == nil || len(gens) != 2 || len(published) != 2 {
		t.Fatalf("generations %v, published %v, err %v: want a and b only, and an error", gens, published, err)
	}
	if d, _ := f.Desired("c"); d.Generation != 0 {
		t.Fatalf("c got generation %d after the apply stopped", d.Generation)
	}
	// Invalid pods refuse the whole apply: nothing stored or published.
	published = nil
	if gens, err := h.ApplyTo([]string{"a", "c"}, []json.RawMessage{testPod("Bad_Name", "x")}); err == nil || len(gens) != 0 || len(published) != 0 {
		t.Fatalf("invalid pod: generations %v, published %v, err %v", gens, published, err)
	}
}

// doneToken is a publish that completed at once.
type doneToken struct{}

func (doneToken) Wait() bool                     { return true }
func (doneToken) WaitTimeout(time.Duration) bool { return true }
func (doneToken) Done() <-chan struct{}          { return closedChan }
func (doneToken) Error() error                   { return nil }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// A status batch asks the scheduler for a pass only when it changed what
// the scheduler reads of a hub pod (Ready here); a receipt goes back for
// every batch.
func TestStatusAsksForAPassOnlyWhenAHubPodChanged(t *testing.T) {
	f := testFleet(t, "dev")
	_, key, _ := ed25519.GenerateKey(nil)
	receipts, passes := 0, 0
	client := &recordingClient{onPublish: func(string, []byte) { receipts++ }}
	h := New(Config{Broker: "test", Key: key, Connect: func(*mqtt.ClientOptions) mqtt.Client { return client },
		Changed: func() { passes++ }}, f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := func(ready v1.ConditionStatus) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", Annotations: map[string]string{AnnotationScheduled: "true"}},
			Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: ready}}}}
	}
	for i, c := range []struct {
		ready  v1.ConditionStatus
		passes int
	}{{v1.ConditionFalse, 1}, {v1.ConditionFalse, 1}, {v1.ConditionTrue, 2}, {v1.ConditionTrue, 2}} {
		b := &protocol.StatusBatch{Device: "dev", Epoch: "e1", After: int64(i),
			Items: []protocol.StatusItem{{Seq: int64(i + 1), Key: "default/web", Pod: pod(c.ready)}}}
		if err := h.saveStatus("dev", b); err != nil {
			t.Fatal(err)
		}
		if passes != c.passes || receipts != i+1 {
			t.Fatalf("batch %d (Ready %s): %d passes asked, %d receipts; want %d and %d", i, c.ready, passes, receipts, c.passes, i+1)
		}
	}
}
