package devicelink

import (
	"crypto/ed25519"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/protocol"
)

// ownersSet is a replica's ownership in these tests: the devices it owns.
type ownersSet map[string]bool

func (o ownersSet) Owns(dev string) bool { return o[dev] }
func (o ownersSet) WithOwned(dev string, handle func()) bool {
	if !o[dev] {
		return false
	}
	handle()
	return true
}

// subscribingClient records the hub's subscriptions and publishes.
type subscribingClient struct {
	mqtt.Client
	mu         sync.Mutex
	handlers   map[string]mqtt.MessageHandler
	subscribed chan string
	published  []string // topics
}

func (c *subscribingClient) IsConnected() bool { return true }
func (c *subscribingClient) Disconnect(uint)   {}
func (c *subscribingClient) Subscribe(filter string, _ byte, h mqtt.MessageHandler) mqtt.Token {
	c.mu.Lock()
	c.handlers[filter] = h
	c.mu.Unlock()
	select {
	case c.subscribed <- filter:
	default:
	}
	return doneToken{}
}
func (c *subscribingClient) Publish(topic string, _ byte, _ bool, _ interface{}) mqtt.Token {
	c.mu.Lock()
	c.published = append(c.published, topic)
	c.mu.Unlock()
	return doneToken{}
}
func (c *subscribingClient) handler(filter string) mqtt.MessageHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handlers[filter]
}
func (c *subscribingClient) count(topic string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, p := range c.published {
		if p == topic {
			n++
		}
	}
	return n
}

type ownMessage struct {
	mqtt.Message
	topic    string
	payload  []byte
	retained bool
}

func (m ownMessage) Topic() string   { return m.topic }
func (m ownMessage) Payload() []byte { return m.payload }
func (m ownMessage) Retained() bool  { return m.retained }

func ownersLink(t *testing.T, owners Owners, devices ...string) (*Link, *subscribingClient) {
	t.Helper()
	return ownersLinkObserved(t, owners, nil, devices...)
}

func ownersLinkObserved(t *testing.T, owners Owners, obs Observer, devices ...string) (*Link, *subscribingClient) {
	t.Helper()
	f := testFleet(t, devices...)
	_, key, _ := ed25519.GenerateKey(nil)
	client := &subscribingClient{handlers: map[string]mqtt.MessageHandler{}, subscribed: make(chan string, 64)}
	h := New(Config{Broker: "test", Key: key, Connect: func(*mqtt.ClientOptions) mqtt.Client { return client }, Owners: owners, Observe: obs},
		f, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(h.Close)
	h.onConnect(client)
	return h, client
}

// A replica handles the reports of the devices it owns and drops the
// others' (counted), logs excepted; only the owner answers a heartbeat.
func TestReportsOfDevicesOwnedElsewhereAreDropped(t *testing.T) {
	obs := &countingObserver{refused: map[string]int{}, notOwned: map[string]int{}}
	h, client := ownersLinkObserved(t, ownersSet{"mine": true}, obs, "mine", "theirs")
	beat := client.handler(h.topics.All(protocol.KindHeartbeat))
	for _, dev := range []string{"mine", "theirs"} {
		beat(client, ownMessage{topic: h.topics.Device(dev, protocol.KindHeartbeat), payload: protocol.Encode(&protocol.Heartbeat{Device: dev})})
	}
	if n := client.count(h.topics.Device("mine", protocol.KindStatusAck)); n != 1 {
		t.Fatalf("receipts to the owned device: %d, want 1", n)
	}
	if n := client.count(h.topics.Device("theirs", protocol.KindStatusAck)); n != 0 {
		t.Fatalf("receipts to a device owned elsewhere: %d, want 0", n)
	}
	if h.Dropped() != 1 {
		t.Fatalf("dropped %d, want 1", h.Dropped())
	}
	if obs.notOwned[protocol.KindHeartbeat] != 1 || obs.heartbeats != 1 || len(obs.refused) != 0 {
		t.Fatalf("the observer was told of %v not owned, %d heartbeats stored, %v refused; want 1 heartbeat not owned, 1 stored, none refused",
			obs.notOwned, obs.heartbeats, obs.refused)
	}
	// The replica subscribed to the hub's presence; a lone hub does not.
	if client.handler(h.topics.HubPresence()) == nil {
		t.Fatal("a replica does not hear the hub's presence")
	}
	lone, loneClient := ownersLink(t, nil, "a")
	if loneClient.handler(lone.topics.HubPresence()) != nil {
		t.Fatal("a lone hub subscribed to its own presence")
	}
}

// After a gain, the link subscribes again to the retained kinds and
// announces a new session; the retained deliveries are handled for the
// gained buckets only (the others' were handled at the connection).
func TestGainReplaysRetainedReportsOfTheGainedBuckets(t *testing.T) {
	// Two devices in different buckets.
	a, b := "dev-a", "dev-b"
	if replica.Bucket(a) == replica.Bucket(b) {
		t.Fatal("pick two devices in different buckets")
	}
	owners := ownersSet{a: true}
	h, client := ownersLink(t, owners, a, b)
	for len(client.subscribed) > 0 {
		<-client.subscribed
	}
	connectedLongAgo(h)
	presences := client.count(h.topics.HubPresence())
	owners[b] = true
	h.OwnersChanged([]int{replica.Bucket(b)}, nil)
	want := map[string]bool{}
	handled := h.handlers()
	for _, k := range retainedKinds {
		if handled[k] != nil { // seal-key: with an object link only
			want[h.topics.All(k)] = true
		}
	}
	timeout := time.After(10 * time.Second)
	for len(want) > 0 {
		select {
		case f := <-client.subscribed:
			delete(want, f)
		case <-timeout:
			t.Fatalf("no subscription again within 10s to %v", want)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for client.count(h.topics.HubPresence()) == presences {
		if time.Now().After(deadline) {
			t.Fatal("no new hub session announced within 10s of the gain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	presence := client.handler(h.topics.All(protocol.KindPresence))
	dropped := h.Dropped()
	for _, dev := range []string{a, b} {
		presence(client, ownMessage{topic: h.topics.Device(dev, protocol.KindPresence), retained: true,
			payload: protocol.Encode(&protocol.Presence{Device: dev, Online: true})})
	}
	if got := h.Dropped() - dropped; got != 1 {
		t.Fatalf("retained presences dropped after the gain: %d, want 1 (the device of a bucket held before)", got)
	}
	devs, err := h.fleet.Devices(time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if d.ID == b && !d.Online {
			t.Fatalf("the gained device's retained presence was not stored: %+v", d)
		}
	}
}

// Another replica's last will makes a connected replica announce the
// hub online again.
func TestAnotherReplicasWillIsAnswered(t *testing.T) {
	h, client := ownersLink(t, ownersSet{}, "a")
	before := client.count(h.topics.HubPresence())
	client.handler(h.topics.HubPresence())(client, ownMessage{topic: h.topics.HubPresence(), payload: protocol.Encode(&protocol.Presence{Online: false})})
	deadline := time.Now().Add(10 * time.Second)
	for client.count(h.topics.HubPresence()) != before+1 {
		if time.Now().After(deadline) {
			t.Fatal("the hub's presence was not announced again within 10s of another replica's will")
		}
		time.Sleep(10 * time.Millisecond)
	}
	client.handler(h.topics.HubPresence())(client, ownMessage{topic: h.topics.HubPresence(), payload: protocol.Encode(&protocol.Presence{Online: true, Session: "x"})})
	if client.count(h.topics.HubPresence()) != before+1 {
		t.Fatal("an online presence was answered")
	}
}

// Two gains in a row: the retained deliveries of the first, still on
// their way when the second subscribes again, are handled all the same.
func TestRetainedReportsOfAnEarlierGainStayHandled(t *testing.T) {
	a, b, c := "dev-a", "dev-b", "dev-c"
	if replica.Bucket(a) == replica.Bucket(b) || replica.Bucket(b) == replica.Bucket(c) || replica.Bucket(a) == replica.Bucket(c) {
		t.Fatal("pick three devices in different buckets")
	}
	owners := ownersSet{a: true}
	h, client := ownersLink(t, owners, a, b, c)
	announced := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for client.count(h.topics.HubPresence()) < n {
			if time.Now().After(deadline) {
				t.Fatalf("waiting for hub session announcement %d: %d within 10s", n, client.count(h.topics.HubPresence()))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	connectedLongAgo(h)
	base := client.count(h.topics.HubPresence())
	owners[b] = true
	h.OwnersChanged([]int{replica.Bucket(b)}, nil)
	announced(base + 1)
	owners[c] = true
	h.OwnersChanged([]int{replica.Bucket(c)}, nil) // coalesced: at most one every gainEvery
	announced(base + 2)
	presence := client.handler(h.topics.All(protocol.KindPresence))
	dropped := h.Dropped()
	for _, dev := range []string{b, c} {
		presence(client, ownMessage{topic: h.topics.Device(dev, protocol.KindPresence), retained: true,
			payload: protocol.Encode(&protocol.Presence{Device: dev, Online: true})})
	}
	if got := h.Dropped() - dropped; got != 0 {
		t.Fatalf("retained presences of the two gains dropped: %d, want 0", got)
	}
}

// connectedLongAgo dates the link's connection back past replayFor: its
// own retained deliveries are over.
func connectedLongAgo(h *Link) {
	h.own.mu.Lock()
	h.own.connected = h.now().Add(-replayFor)
	h.own.mu.Unlock()
}

// A gain soon after the connection: the connection's retained
// deliveries of the buckets held before, which may still be on the way
// (a broker's backlog), are handled all the same.
func TestGainSoonAfterConnectingKeepsTheConnectionsRetainedReports(t *testing.T) {
	a, b := "dev-a", "dev-b"
	if replica.Bucket(a) == replica.Bucket(b) {
		t.Fatal("pick two devices in different buckets")
	}
	owners := ownersSet{a: true}
	h, client := ownersLink(t, owners, a, b)
	base := client.count(h.topics.HubPresence())
	owners[b] = true
	h.OwnersChanged([]int{replica.Bucket(b)}, nil)
	deadline := time.Now().Add(10 * time.Second)
	for client.count(h.topics.HubPresence()) == base {
		if time.Now().After(deadline) {
			t.Fatal("no new hub session announced within 10s of the gain")
		}
		time.Sleep(10 * time.Millisecond)
	}
	presence := client.handler(h.topics.All(protocol.KindPresence))
	dropped := h.Dropped()
	for _, dev := range []string{a, b} {
		presence(client, ownMessage{topic: h.topics.Device(dev, protocol.KindPresence), retained: true,
			payload: protocol.Encode(&protocol.Presence{Device: dev, Online: true})})
	}
	if got := h.Dropped() - dropped; got != 0 {
		t.Fatalf("retained presences dropped after a gain just after the connection: %d, want 0", got)
	}
	devs, err := h.fleet.Devices(time.Now(), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if !d.Online {
			t.Errorf("%s: retained presence not stored", d.ID)
		}
	}
}
