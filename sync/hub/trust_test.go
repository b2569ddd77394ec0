package hub_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// Attacks by a client of the broker that publishes as a device, or as
// the hub (the broker here allows anyone, as a misconfigured one would):
// each must leave the hub and the device believing only what the real
// device and hub sent.

// rogue connects a client of the broker with its own ID.
func (r *rig) rogue(id string) mqtt.Client {
	c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtt://" + r.addr).SetClientID(id))
	if tok := c.Connect(); tok.Wait() && tok.Error() != nil {
		r.t.Fatal(tok.Error())
	}
	r.t.Cleanup(func() { c.Disconnect(0) })
	return c
}

func publish(t *testing.T, c mqtt.Client, topic string, retained bool, payload []byte) {
	t.Helper()
	if tok := c.Publish(topic, 1, retained, payload); tok.Wait() && tok.Error() != nil {
		t.Fatal(tok.Error())
	}
}

// report queues one status of pod web, marked n, on the device.
func report(t *testing.T, a *uplink.Agent, n int) {
	t.Helper()
	if err := a.Publish([]store.Item{{Key: "default/web", Kind: store.KindPod, Payload: mirror("web", n)}}); err != nil {
		t.Fatal(err)
	}
}

// mirrorN is the mark of a device's web mirror at the hub ("" for none).
func mirrorN(r *rig, dev string) string {
	ms, _ := r.fleet.Mirrors(dev)
	for _, m := range ms {
		if m.Key == "default/web" {
			var p v1.Pod
			json.Unmarshal(m.Pod, &p)
			return p.Annotations["n"]
		}
	}
	return ""
}

// A forged receipt for a sequence number the device never sent is not
// believed: the device keeps sending, and does not store it, so it keeps
// sending after a restart too.
func TestForgedStatusAckIgnored(t *testing.T) {
	r := newRig(t)
	db := filepath.Join(r.dir, "device.db")
	a, st, halt := r.device("gw-a", db, &fakePods{})
	report(t, a, 1)
	eventually(t, 10*time.Second, "status 1 at the hub", func() bool { return mirrorN(r, "gw-a") == "1" })

	c := r.rogue("rogue")
	publish(t, c, protocol.Topics{}.Device("gw-a", protocol.KindStatusAck), false,
		protocol.Encode(&protocol.StatusAck{Epoch: st.Epoch(), Seq: 1 << 40}))
	time.Sleep(200 * time.Millisecond) // let the device take it (or not)
	if s, _ := st.Stats(); s.Acked > s.Assigned {
		t.Fatalf("the device stored a receipt beyond what it sent: %+v", s)
	}
	report(t, a, 2)
	deadline := time.Now().Add(10 * time.Second)
	for mirrorN(r, "gw-a") != "2" {
		if time.Now().After(deadline) {
			s, _ := st.Stats()
			ms, _ := r.fleet.Mirrors("gw-a")
			evs, _ := r.fleet.Events("gw-a")
			t.Fatalf("status 2 not at the hub: %+v %+v %+v", s, ms, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}

	halt()
	a, _, _ = r.device("gw-a", db, &fakePods{})
	report(t, a, 3)
	eventually(t, 10*time.Second, "status 3 at the hub after a restart", func() bool { return mirrorN(r, "gw-a") == "3" })
}

// A forged status batch with a huge sequence number does not move the
// hub's cursor, nor pin its fake Running pod; a run of forged batches
// that do follow the cursor shadows the device's stream only until the
// device, seeing receipts for numbers it never sent, starts a new epoch:
// its real reports replace the fakes.
func TestForgedStatusJumpIgnored(t *testing.T) {
	r := newRig(t)
	a, st, _ := r.deviceWith("gw-j", filepath.Join(r.dir, "device.db"), &fakePods{}, func(c *uplink.Config) {
		c.ResendAfter = 600 * time.Millisecond
	})
	report(t, a, 1)
	eventually(t, 10*time.Second, "status 1 at the hub", func() bool { return mirrorN(r, "gw-j") == "1" })

	c := r.rogue("rogue")
	topic := protocol.Topics{}.Device("gw-j", protocol.KindStatus)
	fake := func(seq int64, n int) protocol.StatusItem {
		var p v1.Pod
		json.Unmarshal(mirror("web", n), &p)
		return protocol.StatusItem{Seq: seq, Key: "default/web", Pod: &p}
	}
	publish(t, c, topic, false, protocol.Encode(&protocol.StatusBatch{Device: "gw-j", Epoch: st.Epoch(), After: 1,
		Items: []protocol.StatusItem{fake(1<<40, 666)}}))
	report(t, a, 2)
	eventually(t, 10*time.Second, "status 2 at the hub after a forged jump", func() bool { return mirrorN(r, "gw-j") == "2" })

	// Forged batches that follow the cursor, far ahead of the device.
	s, _ := st.Stats()
	after := s.Assigned
	for range 20 {
		var items []protocol.StatusItem
		for range protocol.MaxBatch {
			after++
			items = append(items, fake(after, 666))
		}
		publish(t, c, topic, false, protocol.Encode(&protocol.StatusBatch{Device: "gw-j", Epoch: st.Epoch(), After: after - protocol.MaxBatch, Items: items}))
	}
	eventually(t, 10*time.Second, "the forged run stored", func() bool { return mirrorN(r, "gw-j") == "666" })
	report(t, a, 3)
	eventually(t, 20*time.Second, "the device's status 3 replacing the fake", func() bool { return mirrorN(r, "gw-j") == "3" })
	report(t, a, 4)
	eventually(t, 10*time.Second, "status 4 in the new epoch", func() bool { return mirrorN(r, "gw-j") == "4" })
}

// api calls the hub's HTTP API in process.
func (r *rig) api(t *testing.T, method, path string, body any) (int, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	rec := httptest.NewRecorder()
	r.hub.API(time.Minute).Handler().ServeHTTP(rec, httptest.NewRequest(method, path, bytes.NewReader(b)))
	return rec.Code, rec.Body.String()
}

// A device sets only labels under device.podvisor.io/ (as a kubelet under
// NodeRestriction): forged heartbeat labels do not steer `apply
// --selector`, and a heartbeat under an unknown ID makes no device.
func TestLabelInjectionDoesNotSteerSelectors(t *testing.T) {
	r := newRig(t)
	r.deviceWith("gw-l", filepath.Join(r.dir, "l", "device.db"), &fakePods{}, func(c *uplink.Config) {
		c.Labels = map[string]string{"site": "plant-1", protocol.DeviceLabelPrefix + "model": "gw100"} // site is not sent
	})
	r.device("gw-x", filepath.Join(r.dir, "x", "device.db"), &fakePods{})
	if code, out := r.api(t, "PUT", "/v1/devices/gw-l/labels", map[string]string{"site": "plant-1"}); code != 200 {
		t.Fatalf("label: %d %s", code, out)
	}
	eventually(t, 10*time.Second, "gw-l's own label at the hub", func() bool {
		d, _ := r.fleet.GetDevice("gw-l", time.Now(), time.Minute)
		return d.Labels[protocol.DeviceLabelPrefix+"model"] == "gw100"
	})

	// Forged heartbeats claim the operator's label for gw-x and a ghost.
	c := r.rogue("rogue")
	for _, dev := range []string{"gw-x", "ghost"} {
		publish(t, c, protocol.Topics{}.Device(dev, protocol.KindHeartbeat), false, protocol.Encode(&protocol.Heartbeat{Device: dev,
			Time: time.Now(), Labels: map[string]string{"site": "plant-1", "node-restriction.kubernetes.io/x": "y"}}))
	}
	eventually(t, 10*time.Second, "the forged labels refused and counted", func() bool {
		evs, _ := r.fleet.Events("gw-x")
		for _, e := range evs {
			if strings.Contains(e.Message, "labels outside device.podvisor.io/ dropped") && strings.Contains(e.Message, "site") {
				return true
			}
		}
		return false
	})
	code, out := r.api(t, "POST", "/v1/apply", api.ApplyRequest{Selector: map[string]string{"site": "plant-1"}, Pods: []json.RawMessage{podJSON("secret")}})
	if code != 200 || !strings.Contains(out, `"gw-l"`) || strings.Contains(out, "gw-x") || strings.Contains(out, "ghost") {
		t.Fatalf("apply --selector site=plant-1: %d %s, want gw-l alone", code, out)
	}
	if _, err := r.fleet.GetDevice("ghost", time.Now(), time.Minute); !errors.Is(err, fleetdb.ErrNotFound) {
		t.Fatalf("a heartbeat made device ghost: %v", err)
	}
	d, _ := r.fleet.GetDevice("gw-x", time.Now(), time.Minute)
	if d.Labels["site"] != "" {
		t.Fatalf("gw-x labels %v", d.Labels)
	}
	// The operator may choose to select on a device's own label.
	code, out = r.api(t, "POST", "/v1/apply", api.ApplyRequest{Selector: map[string]string{protocol.DeviceLabelPrefix + "model": "gw100"}, Pods: []json.RawMessage{podJSON("fw")}})
	if code != 200 || !strings.Contains(out, `"gw-l"`) || strings.Contains(out, "gw-x") {
		t.Fatalf("apply --selector on the device label: %d %s", code, out)
	}
}

// Acks for generations the hub never published, and presence of devices
// it does not know, are refused: no generation shown applied that the
// device never got, no ghost online.
func TestForgedAckAndPresenceRefused(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	r.device("gw-k", filepath.Join(r.dir, "device.db"), pods)
	r.hub.Apply("gw-k", []json.RawMessage{podJSON("web")})
	eventually(t, 10*time.Second, "generation 1 acked", func() bool {
		a, _ := r.fleet.LastAck("gw-k")
		return a != nil && a.ObservedGeneration == 1
	})
	c := r.rogue("rogue")
	publish(t, c, protocol.Topics{}.Device("gw-k", protocol.KindAck), true, protocol.Encode(&protocol.Ack{Device: "gw-k", Generation: 7, ObservedGeneration: 7}))
	publish(t, c, protocol.Topics{}.Device("ghost", protocol.KindPresence), true, protocol.Encode(&protocol.Presence{Device: "ghost", Online: true}))
	publish(t, c, protocol.Topics{}.Device("ghost", protocol.KindAck), true, protocol.Encode(&protocol.Ack{Device: "ghost", Generation: 1, ObservedGeneration: 1}))
	eventually(t, 10*time.Second, "the forged ack refused", func() bool {
		evs, _ := r.fleet.Events("gw-k")
		return len(evs) > 0 && strings.Contains(evs[len(evs)-1].Message, "never published")
	})
	if a, _ := r.fleet.LastAck("gw-k"); a.ObservedGeneration != 1 || a.Generation != 1 {
		t.Fatalf("after a forged ack: %+v", a)
	}
	ds, _ := r.fleet.Devices(time.Now(), time.Minute)
	if len(ds) != 1 || ds[0].ID != "gw-k" {
		t.Fatalf("devices %+v, want gw-k alone", ds)
	}
	// The cleared retained messages leave nothing behind either.
	publish(t, c, protocol.Topics{}.Device("ghost", protocol.KindPresence), true, nil)
	publish(t, c, protocol.Topics{}.Device("ghost", protocol.KindAck), true, nil)
}

// Two installations under one device ID (a cloned image) are shown
// DuplicateID, not Ready, with an event, instead of being merged.
func TestDuplicateDeviceIDShown(t *testing.T) {
	r := newRig(t)
	r.deviceWith("twin", filepath.Join(r.dir, "a", "device.db"), &fakePods{}, func(c *uplink.Config) { c.Heartbeat = 200 * time.Millisecond })
	r.deviceWith("twin", filepath.Join(r.dir, "b", "device.db"), &fakePods{}, func(c *uplink.Config) { c.Heartbeat = 200 * time.Millisecond })
	eventually(t, 20*time.Second, "twin shown DuplicateID", func() bool {
		d, _ := r.fleet.GetDevice("twin", time.Now(), time.Minute)
		return d.DuplicateID && !d.Ready && len(d.Instances) == 2
	})
	evs, _ := r.fleet.Events("twin")
	found := false
	for _, e := range evs {
		found = found || e.Reason == "DuplicateID"
	}
	if !found {
		t.Fatalf("no DuplicateID event: %+v", evs)
	}
	a, _ := os.ReadFile(filepath.Join(r.dir, "a", "hub-instance"))
	b, _ := os.ReadFile(filepath.Join(r.dir, "b", "hub-instance"))
	if len(a) == 0 || bytes.Equal(a, b) {
		t.Fatalf("instance files %q %q", a, b)
	}
}

// A device whose session was taken over by another client with its
// client ID (a burst, a clone) is not left deaf: once it is back it gets
// the next desired document.
func TestSessionTakeoverKeepsDeviceListening(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	a, _, _ := r.deviceWith("gw-t", filepath.Join(r.dir, "device.db"), pods, func(c *uplink.Config) { c.Heartbeat = 300 * time.Millisecond })
	r.hub.Apply("gw-t", []json.RawMessage{podJSON("web")})
	eventually(t, 10*time.Second, "generation 1", func() bool { g, _, _ := pods.state(); return g == 1 })
	var lastTakeover time.Time
	for i := range 3 {
		// The device's own client ID: the broker hands its session over.
		c := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("mqtt://" + r.addr).SetClientID("gw-t").
			SetCleanSession(i%2 == 0).SetAutoReconnect(false))
		if tok := c.Connect(); tok.Wait() && tok.Error() != nil {
			t.Fatal(tok.Error())
		}
		lastTakeover = time.Now()
		time.Sleep(100 * time.Millisecond) // hold the session a moment
		c.Disconnect(0)
	}
	eventually(t, 15*time.Second, "the device connected again after the last takeover", func() bool {
		l, _ := a.Connection()
		return l.Connected && l.Since.After(lastTakeover)
	})
	r.hub.Apply("gw-t", []json.RawMessage{podJSON("db")})
	eventually(t, 15*time.Second, "generation 2 after the takeovers", func() bool { g, _, _ := pods.state(); return g == 2 })
}

// A device whose state.db was reset refuses a replayed older signed
// document (the newest generation it saw is kept beside state.db), the
// hub sees it went back and resyncs it with a newer generation, and the
// device runs exactly the current pods. Without the kept generation (lost
// too), the replay is applied, and the resync still brings it back.
func TestReplayAfterResetRefusedAndResynced(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	dir := filepath.Join(r.dir, "dev")
	db := filepath.Join(dir, "state.db")
	_, _, halt := r.device("gw-r", db, pods)
	r.hub.Apply("gw-r", []json.RawMessage{podJSON("web"), podJSON("old")})
	eventually(t, 10*time.Second, "generation 1", func() bool { g, _, _ := pods.state(); return g == 1 })
	gen1, _ := r.fleet.Desired("gw-r")
	r.hub.Delete("gw-r", "default", "old")
	eventually(t, 10*time.Second, "generation 2 acked", func() bool {
		a, _ := r.fleet.LastAck("gw-r")
		return a != nil && a.ObservedGeneration == 2
	})
	c := r.rogue("rogue")
	desiredTopic := protocol.Topics{}.Device("gw-r", protocol.KindDesired)
	for round, lose := range [][]string{{"state.db"}, {"state.db", "hub-generation"}} {
		halt()
		for _, f := range lose {
			for _, suffix := range []string{"", "-wal", "-shm"} {
				os.Remove(filepath.Join(dir, f+suffix))
			}
		}
		publish(t, c, desiredTopic, true, gen1.Document) // the replay, retained
		// The resync's generation is one above the hub's current one,
		// read before the device is back: once it is, the hub may resync
		// it at any moment.
		cur, _ := r.fleet.Desired("gw-r")
		want := cur.Generation + 1
		pods = &fakePods{}
		_, _, halt = r.device("gw-r", db, pods)
		// The hub must hold the device's ack of the resync too: the next
		// round's regression is judged against the generation the hub last
		// saw the device observe, and an ack still in flight at the halt
		// would leave it at the refusal's.
		eventually(t, 15*time.Second, fmt.Sprintf("round %d: the device resynced to generation %d and the hub holds its ack", round, want), func() bool {
			g, _, _ := pods.state()
			a, _ := r.fleet.LastAck("gw-r")
			return g >= want && a != nil && a.ObservedGeneration >= want
		})
		if _, names, _ := pods.state(); fmt.Sprint(names) != "[web]" {
			t.Fatalf("round %d: the device runs %v, want [web]", round, names)
		}
		if round == 0 {
			if _, _, applies := pods.state(); applies != 1 {
				t.Fatalf("round 0: %d applies: the replay was applied", applies)
			}
		}
	}
	if a, _ := r.fleet.LastAck("gw-r"); a == nil || a.Error != "" {
		t.Fatalf("last ack %+v", a)
	}
}

// A flood of junk on a device's topics is counted, logged and kept only
// throttled (fleet.db does not grow one event per message), and the
// device is still served.
func TestRefusedFloodBounded(t *testing.T) {
	r := newRig(t)
	pods := &fakePods{}
	r.device("gw-f", filepath.Join(r.dir, "device.db"), pods)
	r.hub.Apply("gw-f", []json.RawMessage{podJSON("web")})
	eventually(t, 10*time.Second, "generation 1", func() bool { g, _, _ := pods.state(); return g == 1 })
	c := r.rogue("rogue")
	for i := range 3000 {
		c.Publish(protocol.Topics{}.Device("gw-f", protocol.KindStatus), 0, false, []byte(fmt.Sprintf(`{"junk":%d}`, i)))
		c.Publish(protocol.Topics{}.Device("gw-f", protocol.KindDesired), 0, false, []byte(fmt.Sprintf(`{"junk":%d}`, i)))
	}
	publish(t, c, protocol.Topics{}.Device("gw-f", protocol.KindStatus), false, []byte(`{"last":1}`))
	r.hub.Apply("gw-f", []json.RawMessage{podJSON("db")})
	eventually(t, 30*time.Second, "generation 2 through the flood", func() bool { g, _, _ := pods.state(); return g == 2 })
	evs, _ := r.fleet.Events("gw-f")
	if len(evs) > 30 {
		t.Fatalf("%d events kept for a flood of 3000 refused messages", len(evs))
	}
}

// The hub's cursor rules, on the fleet database alone: an unknown device
// is refused; a new epoch is taken only from its start and replaces the
// device's mirrors; events are kept within the retention bounds.
func TestFleetCursorRulesAndRetention(t *testing.T) {
	f, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	now := time.Unix(1_800_000_000, 0)
	pod := func(name string) *v1.Pod {
		var p v1.Pod
		json.Unmarshal(mirror(name, 1), &p)
		return &p
	}
	batch := func(epoch string, after int64, keys ...string) *protocol.StatusBatch {
		b := &protocol.StatusBatch{Device: "gw-c", Epoch: epoch, After: after}
		for i, k := range keys {
			b.Items = append(b.Items, protocol.StatusItem{Seq: after + int64(i) + 1, Key: "default/" + k, Pod: pod(k)})
		}
		return b
	}
	if _, _, _, err := f.ApplyStatus(batch("e1", 0, "web"), now); !errors.Is(err, fleetdb.ErrUnknownDevice) {
		t.Fatalf("a batch of an unknown device: %v", err)
	}
	f.AddDevice("gw-c")
	if cur, _, gap, err := f.ApplyStatus(batch("e1", 0, "web", "db"), now); err != nil || gap || cur != 2 {
		t.Fatalf("first batch: cursor %d gap %v %v", cur, gap, err)
	}
	if cur, _, gap, _ := f.ApplyStatus(batch("e1", 5, "x"), now); !gap || cur != 2 {
		t.Fatalf("a batch after a gap: cursor %d gap %v", cur, gap)
	}
	if cur, _, gap, _ := f.ApplyStatus(batch("e2", 40, "x"), now); !gap || cur != 0 {
		t.Fatalf("another epoch not from its start: cursor %d gap %v", cur, gap)
	}
	if ms, _ := f.Mirrors("gw-c"); len(ms) != 2 {
		t.Fatalf("mirrors after refused batches: %+v", ms)
	}
	if cur, _, gap, _ := f.ApplyStatus(batch("e2", 0, "web"), now); gap || cur != 1 {
		t.Fatalf("a new epoch from its start: cursor %d gap %v", cur, gap)
	}
	if ms, _ := f.Mirrors("gw-c"); len(ms) != 1 || ms[0].Key != "default/web" {
		t.Fatalf("a new epoch replaces the mirrors: %+v", ms)
	}

	f.SetRetention(fleetdb.Retention{Events: 5, MaxAge: time.Hour})
	for i := range 20 {
		f.SaveRejection("gw-c", fmt.Sprint("old ", i), now.Add(-2*time.Hour))
	}
	for i := range 8 {
		f.SaveRejection("gw-c", fmt.Sprint("new ", i), now.Add(time.Duration(i)*time.Second))
	}
	evs, _ := f.Events("gw-c")
	if len(evs) != 5 || evs[0].Message != "new 3" || evs[4].Message != "new 7" {
		t.Fatalf("events kept: %+v", evs)
	}
	f.SaveRejection("gw-c", "late", now.Add(2*time.Hour))
	if evs, _ := f.Events("gw-c"); len(evs) != 1 || evs[0].Message != "late" {
		t.Fatalf("events past their age kept: %+v", evs)
	}
	// Not for unknown devices: nothing stored, nothing made.
	f.SaveRejection("ghost", "x", now)
	if _, err := f.GetDevice("ghost", now, time.Minute); !errors.Is(err, fleetdb.ErrNotFound) {
		t.Fatalf("a rejection made a device: %v", err)
	}
}

// Forged status items of made-up pods stop at the bound of mirrors per device.
func TestMirrorsBounded(t *testing.T) {
	f, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.AddDevice("gw-m")
	var p v1.Pod
	json.Unmarshal(mirror("x", 1), &p)
	after := int64(0)
	limit := fleetdb.DefaultRetention.Mirrors
	for after < int64(limit)+200 {
		b := &protocol.StatusBatch{Device: "gw-m", Epoch: "e", After: after}
		for range protocol.MaxBatch {
			after++
			b.Items = append(b.Items, protocol.StatusItem{Seq: after, Key: fmt.Sprint("default/p", after), Pod: &p})
		}
		if _, _, _, err := f.ApplyStatus(b, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if ms, _ := f.Mirrors("gw-m"); len(ms) != limit {
		t.Fatalf("%d mirrors kept, want %d", len(ms), limit)
	}
}
