package hub

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

func testFleet(t *testing.T, devices ...string) *Fleet {
	t.Helper()
	f, err := OpenFleet(filepath.Join(t.TempDir(), "fleet.db"))
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

// The report paths run on statements prepared when the fleet opens.
func TestReportPathsUsePreparedStatements(t *testing.T) {
	f := testFleet(t, "dev")
	at := time.Unix(1700000000, 0)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}
	batches := []*protocol.StatusBatch{
		{Device: "dev", Epoch: "e1", After: 0, Items: []protocol.StatusItem{{Seq: 1, Key: "default/web", Pod: pod}, {Seq: 2, Key: "default/web", Event: &protocol.Event{Reason: "Killing"}}}},
		{Device: "dev", Epoch: "e1", After: 1, Items: []protocol.StatusItem{{Seq: 2, Key: "default/web", Event: &protocol.Event{Reason: "Killing"}}, {Seq: 3, Key: "default/web"}}},
		{Device: "dev", Epoch: "e2", After: 0, Items: []protocol.StatusItem{{Seq: 1, Key: "default/db", Pod: pod}}},
	}
	for i, b := range batches {
		cursor, _, gap, err := f.ApplyStatus(b, at)
		if err != nil || gap || cursor != b.Items[len(b.Items)-1].Seq {
			t.Fatalf("batch %d: cursor %d, gap %v, %v", i, cursor, gap, err)
		}
	}
	if err := f.SaveDesired(DesiredDoc{Device: "dev", Generation: 1, Document: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SaveAck(&protocol.Ack{Device: "dev", Generation: 1, ObservedGeneration: 1}, at); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: "dev", Instance: "i1"}, at); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SavePresence("dev", &protocol.Presence{Online: true, Instance: "i2"}, at); err != nil {
		t.Fatal(err)
	}
	if n := f.stmts.unprepared.Load(); n != 0 {
		t.Fatalf("%d queries of the report paths were not prepared at open", n)
	}
}

// The bound on a device's mirrors holds across batches although the
// count is kept between them: removals free room, a replayed batch
// (QoS 1 redelivery) changes nothing, a new epoch starts from none.
func TestMirrorBoundAcrossBatches(t *testing.T) {
	f := testFleet(t, "dev")
	f.SetRetention(Retention{Events: 10, Mirrors: 3})
	at := time.Unix(1700000000, 0)
	pod := func(seq int64, name string) protocol.StatusItem {
		return protocol.StatusItem{Seq: seq, Key: "default/" + name, Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}}
	}
	keys := func() string {
		ms, err := f.Mirrors("dev")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.Key)
		}
		return fmt.Sprint(out)
	}
	steps := []struct {
		batch protocol.StatusBatch
		want  string
	}{
		{protocol.StatusBatch{Epoch: "e1", After: 0, Items: []protocol.StatusItem{pod(1, "a"), pod(2, "b")}}, "[default/a default/b]"},
		{protocol.StatusBatch{Epoch: "e1", After: 2, Items: []protocol.StatusItem{pod(3, "c"), pod(4, "d")}}, "[default/a default/b default/c]"},
		// Replayed: nothing new, the count unchanged.
		{protocol.StatusBatch{Epoch: "e1", After: 2, Items: []protocol.StatusItem{pod(3, "c"), pod(4, "d")}}, "[default/a default/b default/c]"},
		{protocol.StatusBatch{Epoch: "e1", After: 4, Items: []protocol.StatusItem{{Seq: 5, Key: "default/a"}, pod(6, "e"), pod(7, "f")}}, "[default/b default/c default/e]"},
		{protocol.StatusBatch{Epoch: "e2", After: 0, Items: []protocol.StatusItem{pod(1, "x"), pod(2, "y"), pod(3, "z")}}, "[default/x default/y default/z]"},
		{protocol.StatusBatch{Epoch: "e2", After: 3, Items: []protocol.StatusItem{pod(4, "w")}}, "[default/x default/y default/z]"},
	}
	for i, s := range steps {
		s.batch.Device = "dev"
		if _, _, gap, err := f.ApplyStatus(&s.batch, at); err != nil || gap {
			t.Fatalf("step %d: gap %v, %v", i, gap, err)
		}
		if got := keys(); got != s.want {
			t.Fatalf("step %d: mirrors %s, want %s", i, got, s.want)
		}
	}
}

// A mirror stores a pod's newest status whichever statement a pod's
// status tries first (an update of a known pod or an insert of a new
// one): new and known pods alternate in a batch, a pod reported twice
// keeps its later status, and at the bound a known pod is still updated
// while a new one is refused.
func TestMirrorUpdateOrInsert(t *testing.T) {
	f := testFleet(t, "dev")
	f.SetRetention(Retention{Events: 10, Mirrors: 3})
	at := time.Unix(1700000000, 0)
	pod := func(seq int64, name string, phase v1.PodPhase) protocol.StatusItem {
		return protocol.StatusItem{Seq: seq, Key: "default/" + name, Pod: &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Status: v1.PodStatus{Phase: phase}}}
	}
	mirrors := func() string {
		ms, err := f.Mirrors("dev")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			var p v1.Pod
			if err := json.Unmarshal(m.Pod, &p); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s@%d:%s", m.Key, m.Seq, p.Status.Phase))
		}
		return fmt.Sprint(out)
	}
	steps := []struct {
		batch protocol.StatusBatch
		want  string
	}{
		{protocol.StatusBatch{Epoch: "e1", After: 0, Items: []protocol.StatusItem{
			pod(1, "a", v1.PodPending), pod(2, "a", v1.PodRunning), pod(3, "b", v1.PodPending)}},
			"[default/a@2:Running default/b@3:Pending]"},
		{protocol.StatusBatch{Epoch: "e1", After: 3, Items: []protocol.StatusItem{
			pod(4, "b", v1.PodRunning), pod(5, "c", v1.PodPending), pod(6, "a", v1.PodFailed), pod(7, "d", v1.PodPending), pod(8, "c", v1.PodRunning)}},
			"[default/a@6:Failed default/b@4:Running default/c@8:Running]"},
	}
	for i, s := range steps {
		s.batch.Device = "dev"
		if _, _, gap, err := f.ApplyStatus(&s.batch, at); err != nil || gap {
			t.Fatalf("step %d: gap %v, %v", i, gap, err)
		}
		if got := mirrors(); got != s.want {
			t.Fatalf("step %d: mirrors %s, want %s", i, got, s.want)
		}
	}
}

// Select matches the labels a device listing shows: the operator's, and
// the device's own under DeviceLabelPrefix, the operator's winning.
func TestSelectMatchesTheListedLabels(t *testing.T) {
	f := testFleet(t, "a", "b", "c")
	at := time.Unix(1700000000, 0)
	own := protocol.DeviceLabelPrefix + "site"
	for dev, site := range map[string]string{"a": "north", "b": "north", "c": "south"} {
		if _, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: dev, Labels: map[string]string{own: site}}, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.SetLabels("a", map[string]string{"fleet": "bench"}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetLabels("b", map[string]string{"fleet": "bench", own: "south"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		selector map[string]string
		want     string
	}{
		{map[string]string{"fleet": "bench"}, "[a b]"},
		{map[string]string{own: "north"}, "[a]"},
		{map[string]string{own: "south"}, "[b c]"},
		{map[string]string{"fleet": "bench", own: "south"}, "[b]"},
		{map[string]string{"fleet": "idle"}, "[]"},
	} {
		ids, err := f.Select(c.selector)
		if err != nil {
			t.Fatal(err)
		}
		ds, _ := f.Devices(at, time.Hour)
		var listed []string
		for _, d := range ds {
			match := true
			for k, v := range c.selector {
				match = match && d.Labels[k] == v
			}
			if match {
				listed = append(listed, d.ID)
			}
		}
		if fmt.Sprint(ids) != c.want || fmt.Sprint(listed) != c.want {
			t.Errorf("select %v: %v (the listing matches %v), want %s", c.selector, ids, listed, c.want)
		}
	}
}

// doneToken is a publish that completed at once.
type doneToken struct{}

func (doneToken) Wait() bool                     { return true }
func (doneToken) WaitTimeout(time.Duration) bool { return true }
func (doneToken) Done() <-chan struct{}          { return closedChan }
func (doneToken) Error() error                   { return nil }

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()
