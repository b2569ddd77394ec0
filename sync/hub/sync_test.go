package hub_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// fakePods records what the agent applies; "default/clash" collides with
// a file pod.
type fakePods struct {
	mu      sync.Mutex
	gen     int64
	pods    []*v1.Pod
	fence   []string
	applies int
	renewed []time.Time
	// renewedEarly: a renewal came before any document was applied.
	renewedEarly bool
}

func (f *fakePods) Conflicts(pods []*v1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pods {
		if p.Name == "clash" {
			out["default/clash"] = "a pod of this name comes from the manifest directory"
		}
	}
	return out, nil
}

func (f *fakePods) Node() (*v1.Node, error) {
	return &v1.Node{Status: v1.NodeStatus{NodeInfo: v1.NodeSystemInfo{KubeletVersion: "test"}}}, nil
}

func (f *fakePods) Renew(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.renewed = append(f.renewed, at)
	f.renewedEarly = f.renewedEarly || f.gen == 0
}

func (f *fakePods) ApplyAssigned(gen int64, pods []*v1.Pod, fence []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen, f.pods, f.fence = gen, pods, fence
	f.applies++
}

func (f *fakePods) state() (int64, []string, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var names []string
	for _, p := range f.pods {
		names = append(names, p.Name)
	}
	return f.gen, names, f.applies
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func quiet() *slog.Logger {
	if os.Getenv("PODVISOR_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

type rig struct {
	t      *testing.T
	addr   string
	broker *broker.Broker
	fleet  *fleetdb.Fleet
	hub    *hub.Hub
	pub    ed25519.PublicKey
	dir    string
}

func newRig(t *testing.T) *rig {
	r := &rig{t: t, addr: freeAddr(t), dir: t.TempDir()}
	var err error
	if r.broker, err = broker.Start(r.addr, quiet()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.broker.Close() })
	var priv ed25519.PrivateKey
	r.pub, priv, _ = ed25519.GenerateKey(nil)
	if r.fleet, err = fleetdb.Open(filepath.Join(r.dir, "fleet.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.fleet.Close() })
	r.hub = hub.New(hub.Config{Broker: "mqtt://" + r.addr, Key: priv}, r.fleet, quiet())
	if err := r.hub.Start(5 * time.Second); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.hub.Close)
	return r
}

// device starts an agent with its own store; stop it with the returned func.
func (r *rig) device(id, db string, pods uplink.Pods) (*uplink.Agent, *store.Store, func()) {
	return r.deviceWith(id, db, pods, nil)
}

// deviceWith is device with a change to the agent's configuration.
func (r *rig) deviceWith(id, db string, pods uplink.Pods, tune func(*uplink.Config)) (*uplink.Agent, *store.Store, func()) {
	if err := r.fleet.AddDevice(id); err != nil {
		r.t.Fatal(err)
	}
	st, err := store.Open(db, store.DefaultLimits)
	if err != nil {
		r.t.Fatal(err)
	}
	cfg := uplink.Config{Broker: "mqtt://" + r.addr, DeviceID: id, HubKey: r.pub,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 500 * time.Millisecond}
	if tune != nil {
		tune(&cfg)
	}
	a, err := uplink.New(cfg, st, pods, quiet())
	if err != nil {
		r.t.Fatal(err)
	}
	if _, _, _, err := a.Stored(); err != nil {
		r.t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { a.Run(stop); close(done) }()
	var once sync.Once
	halt := func() { once.Do(func() { close(stop); <-done; st.Close() }) }
	r.t.Cleanup(halt)
	return a, st, halt
}

func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func podJSON(name string) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":%q},"spec":{"runtimeClassName":"process","containers":[{"name":"app","image":"host","command":["sleep","100"]}]}}`, name))
}

// The hub's pods reach the device, which stores, applies and acks them;
// a pod that collides with a file pod is refused with its reason; the
// device restarted without a broker runs the stored generation.
func TestDesiredStateRoundTrip(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	db := filepath.Join(r.dir, "device.db")
	_, _, halt := r.device("gw-1", db, pods)

	if _, err := r.hub.Apply("gw-1", []json.RawMessage{podJSON("web"), podJSON("clash")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "generation 1 applied and acked", func() bool {
		a, _ := r.fleet.LastAck("gw-1")
		return a != nil && a.ObservedGeneration == 1
	})
	gen, names, _ := pods.state()
	if gen != 1 || fmt.Sprint(names) != "[web]" {
		t.Fatalf("device runs generation %d pods %v, want 1 [web]", gen, names)
	}
	a, _ := r.fleet.LastAck("gw-1")
	if len(a.Pods) != 2 || !a.Pods[0].Accepted || a.Pods[1].Accepted || !strings.Contains(a.Pods[1].Reason, "manifest directory") {
		t.Fatalf("ack %+v", a)
	}

	// Invalid pods never leave the hub.
	if _, err := r.hub.Apply("gw-1", []json.RawMessage{json.RawMessage(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"Bad"}}`)}); err == nil ||
		!strings.Contains(err.Error(), "metadata.name") {
		t.Fatalf("invalid pod: %v", err)
	}
	// Generation 2 replaces web's spec and keeps clash refused.
	if _, err := r.hub.Apply("gw-1", []json.RawMessage{podJSON("db")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "generation 2", func() bool { g, _, _ := pods.state(); return g == 2 })
	if _, names, _ := pods.state(); fmt.Sprint(names) != "[web db]" {
		t.Fatalf("generation 2 pods %v", names)
	}

	// Restarted with the broker gone, the device runs what it stored.
	halt()
	r.broker.Close()
	st, err := store.Open(db, store.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ag, err := uplink.New(uplink.Config{Broker: "mqtt://" + r.addr, DeviceID: "gw-1", HubKey: r.pub}, st, &fakePods{}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	g, stored, _, err := ag.Stored()
	if err != nil {
		t.Fatal(err)
	}
	var names2 []string
	for _, p := range stored {
		names2 = append(names2, p.Name)
	}
	if g != 2 || fmt.Sprint(names2) != "[web db]" {
		t.Fatalf("offline start: generation %d pods %v", g, names2)
	}
}

// A broker alone cannot make a device run anything: a document published
// by another client with another key is refused, the refusal reaches the
// hub, and the generation in force stays.
func TestForgedDesiredRefused(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	r.device("gw-2", filepath.Join(r.dir, "device.db"), pods)
	r.hub.Apply("gw-2", []json.RawMessage{podJSON("web")})
	// The device acknowledges a generation after applying it: each step
	// waits for that ack at the hub, or it could land after the refusal
	// the step looks for and replace it as the device's last.
	acked := func(gen int64) func() bool {
		return func() bool {
			a, _ := r.fleet.LastAck("gw-2")
			return a != nil && a.Error == "" && a.ObservedGeneration == gen
		}
	}
	eventually(t, 10*time.Second, "generation 1 applied and acknowledged at the hub", acked(1))

	_, forger, _ := ed25519.GenerateKey(nil)
	forged, _ := protocol.Sign(protocol.Desired{Device: "gw-2", Generation: 9, Pods: []json.RawMessage{podJSON("miner")}}, forger)
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtt://" + r.addr).SetClientID("rogue"))
	if tok := c.Connect(); tok.Wait() && tok.Error() != nil {
		t.Fatal(tok.Error())
	}
	defer c.Disconnect(0)
	c.Publish(protocol.Topics{}.Device("gw-2", protocol.KindDesired), 1, true, forged).Wait()
	eventually(t, 10*time.Second, "the refusal at the hub", func() bool {
		a, _ := r.fleet.LastAck("gw-2")
		return a != nil && strings.Contains(a.Error, "does not verify")
	})
	if g, names, _ := pods.state(); g != 1 || fmt.Sprint(names) != "[web]" {
		t.Fatalf("after a forged document: generation %d pods %v", g, names)
	}
	if a, _ := r.fleet.LastAck("gw-2"); a.ObservedGeneration != 1 {
		t.Fatalf("observedGeneration %d, want 1", a.ObservedGeneration)
	}
	// Generation 2, then the hub's own generation 1 replayed, malformed
	// JSON, and an oversized document: each refused with its reason, and
	// generation 2 stays in force.
	gen1, _ := r.fleet.Desired("gw-2")
	r.hub.Apply("gw-2", []json.RawMessage{podJSON("db")})
	eventually(t, 10*time.Second, "generation 2 applied and acknowledged at the hub", acked(2))
	desiredTopic := protocol.Topics{}.Device("gw-2", protocol.KindDesired)
	for _, bad := range []struct {
		payload []byte
		reason  string
	}{
		{gen1.Document, "stale generation 1"},
		{[]byte(`{"schema":1,"desired":{"schema":1,`), "desired document"},
		{append([]byte(`{"schema":1,"desired":"`), bytes.Repeat([]byte("x"), protocol.MaxDesiredBytes)...), "over the"},
	} {
		c.Publish(desiredTopic, 1, false, bad.payload).Wait()
		eventually(t, 10*time.Second, "the refusal: "+bad.reason, func() bool {
			a, _ := r.fleet.LastAck("gw-2")
			return a != nil && strings.Contains(a.Error, bad.reason) && a.ObservedGeneration == 2
		})
	}
	if g, names, _ := pods.state(); g != 2 || fmt.Sprint(names) != "[web db]" {
		t.Fatalf("after bad documents: generation %d pods %v", g, names)
	}
	// Garbage on a device's status topic is refused with a reason the hub keeps.
	c.Publish(protocol.Topics{}.Device("gw-2", protocol.KindStatus), 1, false, []byte(`{"schema":1,"epoch":"x","items":[{"seq":1}]}`)).Wait()
	eventually(t, 10*time.Second, "the rejection recorded", func() bool {
		evs, _ := r.fleet.Events("gw-2")
		return len(evs) > 0 && strings.Contains(evs[0].Message, "key is empty")
	})
}

func mirror(name string, n int) []byte {
	p := v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{"n": fmt.Sprint(n)}},
		Status: v1.PodStatus{Phase: v1.PodRunning}}
	b, _ := json.Marshal(p)
	return b
}

// 10,000 status updates of 50 pods, with the broker killed and restarted
// twice on the way: the newest status of every pod reaches the hub, every
// event is stored once, and the outbox empties.
func TestStatusesThroughBrokerRestarts(t *testing.T) {
	r := newRig(t)
	a, st, _ := r.device("gw-3", filepath.Join(r.dir, "device.db"), &fakePods{})
	const updates, podCount = 10000, 50
	events := 0
	for i := range updates {
		name := fmt.Sprintf("p%02d", i%podCount)
		items := []store.Item{{Key: "default/" + name, Kind: store.KindPod, Payload: mirror(name, i)}}
		if i%100 == 0 {
			ev, _ := json.Marshal(protocol.Event{Type: "Normal", Reason: "Tick", Message: fmt.Sprint(i)})
			items = append(items, store.Item{Key: "default/" + name, Kind: store.KindEvent, Payload: ev})
			events++
		}
		if err := a.Publish(items); err != nil {
			t.Fatal(err)
		}
		if i == 3000 || i == 7000 {
			r.broker.Close()
			time.Sleep(200 * time.Millisecond)
			var err error
			if r.broker, err = broker.Start(r.addr, quiet()); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, 60*time.Second, "the outbox drained", func() bool {
		s, _ := st.Stats()
		return s.Rows == 0
	})
	ms, err := r.fleet.Mirrors("gw-3")
	if err != nil || len(ms) != podCount {
		t.Fatalf("%d mirrors (%v), want %d", len(ms), err, podCount)
	}
	for i, m := range ms {
		var p v1.Pod
		json.Unmarshal(m.Pod, &p)
		if want := fmt.Sprint(updates - podCount + i); p.Annotations["n"] != want {
			t.Fatalf("mirror %s is update %s, want the newest, %s", m.Key, p.Annotations["n"], want)
		}
	}
	evs, _ := r.fleet.Events("gw-3")
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.Message] {
			t.Fatalf("event %s stored twice", e.Message)
		}
		seen[e.Message] = true
		var i int
		fmt.Sscan(e.Message, &i)
		if want := fmt.Sprintf("default/p%02d", i%podCount); e.Pod != want {
			t.Fatalf("event %s is about pod %q, want %q", e.Message, e.Pod, want)
		}
	}
	if len(evs) != events {
		t.Fatalf("%d events stored, %d sent", len(evs), events)
	}
}

// A device offline for a long time (compressed: 30,000 status changes of
// 40 pods and 3,000 events while the broker is away) keeps within its
// outbox bounds by dropping the oldest events, and when the broker is back
// the newest status of every pod reaches the hub.
func TestLongOfflineThenDrain(t *testing.T) {
	r := newRig(t)
	r.fleet.AddDevice("gw-4")
	st, err := store.Open(filepath.Join(r.dir, "device.db"), store.Limits{Rows: 1000, Bytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a, err := uplink.New(uplink.Config{Broker: "mqtt://" + r.addr, DeviceID: "gw-4", HubKey: r.pub,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond}, st, &fakePods{}, quiet())
	if err != nil {
		t.Fatal(err)
	}
	r.broker.Close()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { a.Run(stop); close(done) }()
	defer func() { close(stop); <-done }()

	const changes, podCount = 30000, 40
	batch := []store.Item{}
	for i := range changes {
		name := fmt.Sprintf("p%02d", i%podCount)
		batch = append(batch, store.Item{Key: "default/" + name, Kind: store.KindPod, Payload: mirror(name, i)})
		if i%10 == 0 {
			ev, _ := json.Marshal(protocol.Event{Type: "Warning", Reason: "BackOff", Message: fmt.Sprint(i)})
			batch = append(batch, store.Item{Key: "default/" + name, Kind: store.KindEvent, Payload: ev})
		}
		if len(batch) >= 100 { // the daemon's mirror batches a burst of steps
			if err := a.Publish(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	a.Publish(batch)
	s, _ := st.Stats()
	if s.Rows > 1000 || s.Dropped == 0 {
		t.Fatalf("offline outbox: %+v, want at most 1000 rows and dropped events", s)
	}
	if r.broker, err = broker.Start(r.addr, quiet()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the outbox drained", func() bool { s, _ := st.Stats(); return s.Rows == 0 })
	ms, _ := r.fleet.Mirrors("gw-4")
	if len(ms) != podCount {
		t.Fatalf("%d mirrors, want %d", len(ms), podCount)
	}
	for i, m := range ms {
		var p v1.Pod
		json.Unmarshal(m.Pod, &p)
		if want := fmt.Sprint(changes - podCount + i); p.Annotations["n"] != want {
			t.Fatalf("%s is change %s, want the newest, %s", m.Key, p.Annotations["n"], want)
		}
	}
	evs, _ := r.fleet.Events("gw-4")
	if int64(len(evs))+s.Dropped != changes/10 {
		t.Fatalf("%d events stored + %d dropped, want %d sent", len(evs), s.Dropped, changes/10)
	}
	// What was kept is the newest: the last event made it.
	if last := evs[len(evs)-1].Message; last != fmt.Sprint(changes-10) {
		t.Fatalf("the last event stored is %s, want %d", last, changes-10)
	}
}
