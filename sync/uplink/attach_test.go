package uplink_test

import (
	"crypto/ed25519"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/api"
	hubbroker "github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// daemon is the daemon's Assignments as the agent sees it: it records what
// the agent hands it and publishes the statuses and events a test sets.
type daemon struct {
	mu        sync.Mutex
	expected  []string // "generation:pod,pod" per ExpectAssigned call
	applied   []string // the same per ApplyAssigned call
	conflicts map[string]string
	pods      []*v1.Pod
	version   uint64
	changed   chan struct{}
	events    chan supervisor.PodEvent
	links     []string // "connected", "unreachable" or "connecting" per HubLink call
}

var _ supervisor.Assignments = (*daemon)(nil)

func newDaemon(conflicts map[string]string) *daemon {
	return &daemon{conflicts: conflicts, changed: make(chan struct{}), events: make(chan supervisor.PodEvent, 16)}
}

func names(gen int64, pods []*v1.Pod) string {
	var n []string
	for _, p := range pods {
		n = append(n, p.Name)
	}
	return strings.Join(append([]string{strconv.FormatInt(gen, 10)}, n...), ":")
}

func (d *daemon) ExpectAssigned(gen int64, pods []*v1.Pod, _ []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.expected = append(d.expected, names(gen, pods))
}

func (d *daemon) ApplyAssigned(gen int64, pods []*v1.Pod, _ []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = append(d.applied, names(gen, pods))
}

func (d *daemon) Conflicts(pods []*v1.Pod) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range pods {
		if reason, ok := d.conflicts[p.Namespace+"/"+p.Name]; ok {
			out[p.Namespace+"/"+p.Name] = reason
		}
	}
	return out, nil
}

func (d *daemon) Pods() ([]*v1.Pod, uint64, <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pods, d.version, d.changed
}

func (d *daemon) PodEvents() <-chan supervisor.PodEvent { return d.events }

func (d *daemon) Node() (*v1.Node, error) { return &v1.Node{}, nil }

// Stats counts no pod's traffic: the heartbeat carries no network summary.
func (d *daemon) Stats() ([]api.PodStats, error) { return nil, nil }

func (d *daemon) Renew(time.Time) {}

func (d *daemon) HubLink(connected bool, since time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case connected && !since.IsZero():
		d.links = append(d.links, "connected")
	case !connected && !since.IsZero():
		d.links = append(d.links, "unreachable")
	case !connected:
		d.links = append(d.links, "connecting")
	default:
		d.links = append(d.links, "connected with no time")
	}
}

// link is the last state HubLink told.
func (d *daemon) link() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.links) == 0 {
		return ""
	}
	return d.links[len(d.links)-1]
}

// publish sets the daemon's pods, as a reconciliation does.
func (d *daemon) publish(pods ...*v1.Pod) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.pods = pods
	d.version++
	close(d.changed)
	d.changed = make(chan struct{})
}

func (d *daemon) record() (expected, applied []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.expected...), append([]string(nil), d.applied...)
}

func running(name string, phase v1.PodPhase) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Status: v1.PodStatus{Phase: phase}}
}

func podJSON(name string) json.RawMessage {
	return json.RawMessage(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"` + name +
		`"},"spec":{"runtimeClassName":"process","containers":[{"name":"app","image":"host","command":["sleep","100"]}]}}`)
}

func quiet() *slog.Logger {
	if os.Getenv("PODVISOR_TEST_LOG") != "" {
		return slog.Default()
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// farHub plays the hub on a real broker with a plain MQTT client: it
// reads what the device sends and sends what a hub would.
type farHub struct {
	t      *testing.T
	client mqtt.Client
	topics protocol.Topics
	mu     sync.Mutex
	acks   []*protocol.Ack
	items  map[int64]protocol.StatusItem // by sequence number
	epoch  string
	after  []int64 // each batch's "after"
}

func connectHub(t *testing.T, addr string, h *farHub) *farHub {
	t.Helper()
	if h == nil {
		h = &farHub{t: t, items: map[int64]protocol.StatusItem{}}
	}
	h.client = mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("the-hub").
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true))
	if tok := h.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the hub's client cannot connect to %s: %v", addr, tok.Error())
	}
	subs := map[string]mqtt.MessageHandler{
		h.topics.Device("gw-1", protocol.KindAck): func(_ mqtt.Client, m mqtt.Message) {
			ack, err := protocol.DecodeAck(m.Payload())
			if err != nil {
				t.Errorf("the device's ack: %v", err)
				return
			}
			h.mu.Lock()
			h.acks = append(h.acks, ack)
			h.mu.Unlock()
		},
		h.topics.Device("gw-1", protocol.KindStatus): func(_ mqtt.Client, m mqtt.Message) {
			b, err := protocol.DecodeStatusBatch(m.Payload())
			if err != nil {
				t.Errorf("the device's status batch: %v", err)
				return
			}
			h.mu.Lock()
			h.epoch = b.Epoch
			h.after = append(h.after, b.After)
			for _, it := range b.Items {
				h.items[it.Seq] = it
			}
			h.mu.Unlock()
		},
	}
	for topic, handler := range subs {
		if tok := h.client.Subscribe(topic, 1, handler); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			t.Fatalf("subscribing to %s: %v", topic, tok.Error())
		}
	}
	t.Cleanup(func() { h.client.Disconnect(0) })
	return h
}

func (h *farHub) publish(kind string, retained bool, payload []byte) {
	h.t.Helper()
	if tok := h.client.Publish(h.topics.Device("gw-1", kind), 1, retained, payload); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		h.t.Fatalf("publishing %s: %v", kind, tok.Error())
	}
}

// item finds the newest item the device sent for key that matches.
func (h *farHub) item(key string, match func(protocol.StatusItem) bool) (protocol.StatusItem, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var found protocol.StatusItem
	ok := false
	for seq, it := range h.items {
		if it.Key == key && match(it) && (!ok || seq > found.Seq) {
			found, ok = it, true
		}
	}
	return found, ok
}

func (h *farHub) lastAck() *protocol.Ack {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.acks) == 0 {
		return nil
	}
	return h.acks[len(h.acks)-1]
}

func phase(p v1.PodPhase) func(protocol.StatusItem) bool {
	return func(it protocol.StatusItem) bool { return it.Pod != nil && it.Pod.Status.Phase == p }
}

// The agent attached to a daemon, against a real broker and a real
// outbox: the stored hub pods reach the daemon before it runs; a desired
// document is judged with the daemon's verdicts, stored, applied and
// acknowledged; statuses and events are mirrored; receipts let the outbox
// forget, a forged one does not; statuses made while the broker is down
// are kept and sent, in order, once it is back; and a restarted device
// runs the stored document's pods with no broker at all.
func TestAttachedAgent(t *testing.T) {
	addr := freeAddr(t)
	broker, err := hubbroker.Start(addr, quiet())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { broker.Close() })
	pub, priv, _ := ed25519.GenerateKey(nil)
	far := connectHub(t, addr, nil)
	doc, err := protocol.Sign(protocol.Desired{Device: "gw-1", Generation: 1, Pods: []json.RawMessage{podJSON("web"), podJSON("clash")}}, priv)
	if err != nil {
		t.Fatal(err)
	}
	far.publish(protocol.KindDesired, true, doc)

	dir := t.TempDir()
	st, err := store.Open(filepath.Join(dir, "state.db"), store.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	d := newDaemon(map[string]string{"default/clash": "a file pod of this name runs here"})
	// A reconnect comes well after the hub's client is back (its
	// subscriptions then see every batch); a batch lost anyway is sent
	// again after ResendAfter.
	cfg := uplink.Config{Broker: "mqtt://" + addr, DeviceID: "gw-1", HubKey: pub,
		BackoffMin: 700 * time.Millisecond, BackoffMax: time.Second, ResendAfter: 3 * time.Second}
	stop, err := uplink.Attach(cfg, st, d, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if expected, _ := d.record(); len(expected) != 1 || expected[0] != "0" {
		t.Fatalf("ExpectAssigned calls %q, want one with nothing stored", expected)
	}

	// The document: web accepted and applied, clash refused with the
	// daemon's reason, all stored before the ack.
	eventually(t, "generation 1 applied", func() bool {
		_, applied := d.record()
		return len(applied) == 1
	})
	if _, applied := d.record(); applied[0] != "1:web" {
		t.Fatalf("applied %q, want generation 1 with web alone", applied)
	}
	eventually(t, "generation 1 acknowledged", func() bool { a := far.lastAck(); return a != nil && a.ObservedGeneration == 1 })
	ack := far.lastAck()
	if len(ack.Pods) != 2 || !ack.Pods[0].Accepted || ack.Pods[1].Accepted || !strings.Contains(ack.Pods[1].Reason, "a file pod of this name runs here") {
		t.Fatalf("ack %+v", ack.Pods)
	}
	if rec, ok, err := st.Desired(); err != nil || !ok || rec.Generation != 1 {
		t.Fatalf("stored document: generation %d %v %v", rec.Generation, ok, err)
	}

	eventually(t, "the daemon told the hub is connected", func() bool { return d.link() == "connected" })

	// Statuses and events go out.
	d.events <- supervisor.PodEvent{Pod: "default/web", Time: time.Now(), Type: "Normal", Reason: "Started", Message: "Started container app"}
	d.publish(running("web", v1.PodRunning))
	eventually(t, "web Running mirrored", func() bool { _, ok := far.item("default/web", phase(v1.PodRunning)); return ok })
	eventually(t, "the Started event mirrored", func() bool {
		_, ok := far.item("default/web", func(it protocol.StatusItem) bool { return it.Event != nil && it.Event.Reason == "Started" })
		return ok
	})

	// Receipts: a forged one (beyond what was sent) is not believed, a
	// true one lets the outbox forget. They are handled in order.
	far.mu.Lock()
	epoch, last := far.epoch, int64(0)
	for seq := range far.items {
		last = max(last, seq)
	}
	far.mu.Unlock()
	far.publish(protocol.KindStatusAck, false, protocol.Encode(&protocol.StatusAck{Epoch: epoch, Seq: last + 100}))
	far.publish(protocol.KindStatusAck, false, protocol.Encode(&protocol.StatusAck{Epoch: epoch, Seq: last}))
	eventually(t, "the receipt for the last item recorded", func() bool {
		s, err := st.Stats()
		return err == nil && s.Acked == last && s.Rows == 0
	})

	// The broker goes away: statuses made meanwhile are kept.
	broker.Close()
	d.publish(running("web", v1.PodFailed))
	eventually(t, "web Failed kept in the outbox", func() bool {
		s, err := st.Stats()
		return err == nil && s.Rows == 1
	})
	eventually(t, "the daemon told the hub is unreachable", func() bool { return d.link() == "unreachable" })
	if broker, err = hubbroker.Start(addr, quiet()); err != nil {
		t.Fatal(err)
	}
	far = connectHub(t, addr, far)
	eventually(t, "web Failed sent after the reconnect", func() bool { _, ok := far.item("default/web", phase(v1.PodFailed)); return ok })
	eventually(t, "the daemon told the hub is connected again", func() bool { return d.link() == "connected" })
	failed, _ := far.item("default/web", phase(v1.PodFailed))
	far.mu.Lock()
	after := far.after[len(far.after)-1]
	far.mu.Unlock()
	if failed.Seq != last+1 || after != last {
		t.Fatalf("the kept status went as sequence %d after %d, want %d after %d", failed.Seq, after, last+1, last)
	}
	far.publish(protocol.KindStatusAck, false, protocol.Encode(&protocol.StatusAck{Epoch: epoch, Seq: failed.Seq}))
	eventually(t, "the kept status acknowledged", func() bool {
		s, err := st.Stats()
		return err == nil && s.Acked == failed.Seq && s.Rows == 0
	})
	stop()
	broker.Close()

	// Restarted with no broker: the stored document's pods go to the
	// daemon before it runs.
	d2 := newDaemon(nil)
	stop2, err := uplink.Attach(cfg, st, d2, quiet())
	if err != nil {
		t.Fatal(err)
	}
	defer stop2()
	if expected, _ := d2.record(); len(expected) != 1 || expected[0] != "1:web" {
		t.Fatalf("ExpectAssigned calls after a restart %q, want generation 1 with web", expected)
	}
	// Connecting (unless the first attempt failed before the first
	// report), then unreachable from the first failed attempt on, told
	// once: the attempts after it change nothing.
	eventually(t, "the restarted daemon told the hub is unreachable", func() bool { return d2.link() == "unreachable" })
	time.Sleep(1500 * time.Millisecond) // a retry or two (BackoffMin 0.7 s): none is told
	d2.mu.Lock()
	links := strings.Join(d2.links, ",")
	d2.mu.Unlock()
	if links != "connecting,unreachable" && links != "unreachable" {
		t.Errorf("HubLink calls with no broker: %s, want connecting,unreachable", links)
	}
}
