// Package uplink is the device's side of hub sync: it keeps an MQTT
// connection to the hub's broker, takes desired documents (verify,
// validate, store, then acknowledge, then apply), mirrors the daemon's
// pod statuses and events into the outbox and drains it to the hub in
// order, with a bounded window of unacknowledged items. Attach wires it
// to the daemon's supervisor.Assignments from outside.
package uplink

import (
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/throttle"
)

// Config is how a device reaches its hub.
type Config struct {
	Broker string // mqtt://host:port or mqtts://host:port
	// Brokers are further brokers of the same cluster (brokers.go): the
	// device connects to one of Broker and these, and moves to another
	// when it fails. Its session and retained documents live in the
	// cluster.
	Brokers  []string
	DeviceID string
	Prefix   string // topic prefix; "" is protocol.DefaultPrefix
	// HubKey checks desired documents; AllowUnsigned accepts documents
	// without a signature (for a trusted broker only).
	HubKey        ed25519.PublicKey
	AllowUnsigned bool
	TLS           *tls.Config
	Username      string
	Password      string
	// Window bounds the outbox items sent and not yet acknowledged.
	Window int
	// Backoff bounds the reconnect delays (jittered, doubling).
	BackoffMin, BackoffMax time.Duration
	// Heartbeat is the period of node status reports (default 30 s);
	// Version and Labels go with them.
	Heartbeat time.Duration
	Version   string
	Labels    map[string]string
	// ResendAfter is how long sent statuses may wait for the hub's
	// receipt before they are sent again (default 30 s).
	ResendAfter time.Duration
	// Instance names this installation (default: made once and kept
	// beside state.db).
	Instance string
	// OnUpdateOrder receives the hub's update orders that verify with
	// HubKey (never unsigned ones), newest ID only, each once; after a
	// restart the retained order whose ID was handed out last comes once
	// more (update.go). It runs on its own goroutine, one at a time; nil:
	// the device takes no orders.
	OnUpdateOrder func(*protocol.Order)
	// FetchWindow bounds the chunk requests outstanding in a download
	// (default 4); a request unanswered for FetchTimeout (default 10 s,
	// doubling) is sent again, FetchTries times in all (default 6).
	FetchWindow  int
	FetchTimeout time.Duration
	FetchTries   int
	// SealKey opens the hub's ConfigMaps and Secrets, sealed for this
	// device (objectlink.go); its public half is announced on seal-key.
	// nil: the device takes no objects. They need HubKey too.
	SealKey *seal.PrivateKey
	// MaxObjects and MaxObjectBytes bound the objects kept and their
	// data (default 256 and 16 MiB; config objects.maxObjects, maxBytes).
	MaxObjects     int
	MaxObjectBytes int64
	// OnObjectsChanged is told which of the hub's objects changed (came,
	// changed version, or were dropped), so the daemon refreshes the
	// volumes that mount them and retries the pods that wait for them.
	// It runs on its own goroutine, one call at a time, changes that
	// came meanwhile together; nil: nobody is told.
	OnObjectsChanged func([]objects.Ref)
	// OnObjectsOverdue is told which entries of the hub's index stayed
	// pending for ObjectPendingMax without arriving: the getter answers
	// as if they were not listed from then on, and they are told as
	// changed too (after this call), so the containers waiting for them
	// go on. Same goroutine as OnObjectsChanged; nil: nobody is told.
	OnObjectsOverdue func([]objects.Ref)
	// PodLogs reads pods' logs for the hub's logs requests (logs.go),
	// which are taken only signed with HubKey; nil: none are served.
	// LogStreams bounds the streams at once (default 4), LogRate each
	// one's bytes a second (default 64 KiB); a stream whose keep-alives
	// stop for LogKeepAlive (default 30 s) ends.
	PodLogs      PodLogs
	LogStreams   int
	LogRate      int
	LogKeepAlive time.Duration
	// MetricsSummary is the device's metrics in brief, sent with every
	// heartbeat with the outbox's state added (metrics.go); nil: none.
	MetricsSummary func() devmetrics.Summary
}

// Pods is the daemon's desired-pods input as the agent sees it (part of
// supervisor.Assignments).
type Pods interface {
	// Conflicts names the hub pods that cannot run here (a file pod of
	// the same name, a priority class the device lacks), by
	// namespace/name, with the reason. An error means the daemon could
	// not answer now.
	Conflicts(pods []*v1.Pod) (map[string]string, error)
	// ApplyAssigned makes the hub pods exactly these, under the
	// document's fence (namespace/name keys of pods that must not run
	// here); it is idempotent.
	ApplyAssigned(generation int64, pods []*v1.Pod, fence []string)
	// Renew renews the self-fencing leases at sent, the send time (the
	// lease clock, lease.Now) of a heartbeat the hub answered.
	Renew(sent time.Time)
	// Node is the device's node status, for heartbeats.
	Node() (*v1.Node, error)
}

// Agent is the device's hub connection.
type Agent struct {
	cfg    Config
	topics protocol.Topics
	store  *store.Store
	pods   Pods
	log    *slog.Logger
	opts   *mqtt.ClientOptions
	// brokers are the broker URLs each connection tries (brokers.go).
	brokers *brokerList

	lost     chan struct{} // the connection dropped: reconnect
	sendWake chan struct{} // the outbox drain
	beat     chan struct{} // a heartbeat now (at connect)
	// sessBeat answers a hub session's announcement with a heartbeat
	// soon after (sessionbeat.go).
	sessBeat    *sessionBeat
	desiredWake chan struct{} // a desired document is pending
	keyID       string        // names the hub for the generation floor
	refused     *throttle.Counter
	refusedAcks *throttle.Counter

	// outboxAge tells how long the outbox has held unreceipted items.
	outboxAge outboxAge

	mu     sync.Mutex
	client mqtt.Client // of the current connection (a new one each time)
	// clientReady is closed when client's Connect is over (onConnect).
	clientReady chan struct{}
	// applied is the generation in force, floor the newest ever applied
	// from this hub (kept outside state.db); pending is the newest
	// document received and not yet applied: a newer one supersedes it,
	// nothing queues.
	applied   int64
	floor     int64
	pending   *pendingDoc
	win       window // the outbox's send window
	connected bool
	// heard is when a message last came from the hub (receipts answer
	// heartbeats too); hubOnline is the hub's retained presence.
	heard     time.Time
	hubOnline bool
	// now is the clock (time.Now; a test's own).
	now func() time.Time
	// lease is the self-fencing leases' side of the link (lease.go).
	lease leaseLink
	// connWake is closed at the next connection (downloads ask again),
	// connSeq numbers the connections; downloads are the chunk queues of
	// the downloads under way.
	connWake  chan struct{}
	connSeq   uint64
	downloads map[fetchKey]chan chunkMsg

	// The self-update side (update.go, fetch.go).
	ord                          orders
	rep                          reports
	hubReached                   chan struct{}
	reachedOnce                  sync.Once
	refusedOrders, refusedChunks *throttle.Counter

	// linkSt is the connection's state for the daemon's status line (link.go).
	linkSt linkState

	// objs are the hub's ConfigMaps and Secrets (objectlink.go).
	objs hubObjects
	// logs are the pods' log streams to the hub (logs.go).
	logs logStreams
}

// pendingDoc is a desired document whose signature has been checked.
type pendingDoc struct {
	payload []byte
	doc     *protocol.Desired
	conn    uint64 // the connection it came on (leaseLink)
}

// New makes an agent; Stored reads the stored desired pods, Run connects,
// Mirror sends statuses. Attach does all of it for a daemon.
func New(cfg Config, st *store.Store, pods Pods, log *slog.Logger) (*Agent, error) {
	if err := protocol.ValidDeviceID(cfg.DeviceID); err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	if cfg.HubKey == nil && !cfg.AllowUnsigned {
		return nil, fmt.Errorf("hub: no hub key (--hub-key, hub.key) to check desired documents with, and unsigned ones are not allowed")
	}
	if cfg.Window <= 0 {
		cfg.Window = 4 * protocol.MaxBatch
	}
	if cfg.BackoffMin <= 0 {
		cfg.BackoffMin = time.Second
	}
	if cfg.BackoffMax <= 0 {
		cfg.BackoffMax = 2 * time.Minute
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 30 * time.Second
	}
	if cfg.ResendAfter <= 0 {
		cfg.ResendAfter = 30 * time.Second
	}
	if cfg.FetchWindow <= 0 {
		cfg.FetchWindow = defaultFetchWindow
	}
	if cfg.FetchTimeout <= 0 {
		cfg.FetchTimeout = defaultFetchTimeout
	}
	if cfg.FetchTries <= 0 {
		cfg.FetchTries = defaultFetchTries
	}
	// The hub keeps only a device's own labels; say so once here rather
	// than have every heartbeat refused there.
	own := map[string]string{}
	for k, v := range cfg.Labels {
		if strings.HasPrefix(k, protocol.DeviceLabelPrefix) {
			own[k] = v
		} else {
			log.Warn("hub.labels: a device may set only labels under "+protocol.DeviceLabelPrefix+"; not sent (set it at the hub: podhub label device)", "label", k)
		}
	}
	cfg.Labels = own
	brokers, err := newBrokerList(append([]string{cfg.Broker}, cfg.Brokers...), cfg.DeviceID)
	if err != nil {
		return nil, err
	}
	if cfg.Instance == "" {
		if cfg.Instance, err = loadInstance(st.Dir()); err != nil {
			return nil, fmt.Errorf("hub: %w", err)
		}
	}
	a := &Agent{cfg: cfg, topics: protocol.Topics{Prefix: cfg.Prefix}, store: st, pods: pods, log: log,
		lost: make(chan struct{}, 1), sendWake: make(chan struct{}, 1), beat: make(chan struct{}, 1),
		sessBeat:    newSessionBeat(),
		desiredWake: make(chan struct{}, 1), keyID: "unsigned",
		refused: throttle.New(5, time.Minute, nil), refusedAcks: throttle.New(5, time.Minute, nil),
		win: window{size: cfg.Window, resendAfter: cfg.ResendAfter}, now: time.Now, brokers: brokers,
		connWake: make(chan struct{}), downloads: map[fetchKey]chan chunkMsg{},
		ord: orders{wake: make(chan struct{}, 1)}, rep: reports{gate: reportGate{every: reportEvery}},
		hubReached:    make(chan struct{}),
		refusedOrders: throttle.New(5, time.Minute, nil), refusedChunks: throttle.New(5, time.Minute, nil)}
	a.lease.init()
	if cfg.HubKey != nil {
		a.keyID = protocol.KeyID(cfg.HubKey)
	}
	if a.ord.stored, err = loadOrderID(st.Dir(), a.keyID); err != nil {
		// Not fatal: the hub's retained order is its newest.
		log.Error("the newest update order handed out is unreadable; an older one may be handed out again", "err", err)
	}
	if a.floor, err = loadFloor(st.Dir(), a.keyID); err != nil {
		// Not fatal: the stored document's generation still guards.
		log.Error("the newest generation seen from the hub is unreadable; replays older than the stored document are not refused", "err", err)
	}
	a.initObjects()
	a.initLogs()
	st0, err := st.Stats()
	if err != nil {
		return nil, err
	}
	a.win.acked, a.win.sent, a.win.assigned = st0.Acked, st0.Acked, st0.Assigned
	// Messages are handled one at a time, in order, on paho's reader: a
	// flood waits in the socket and at the broker, not in goroutines here.
	// The client ID is the device's identity (its certificate's CN).
	// MQTT 3.1.1 only: no attempt wasted on 3.1 with a broker that
	// refuses a CONNECT for another reason (a cluster node electing).
	opts := mqtt.NewClientOptions().SetClientID(cfg.DeviceID).SetProtocolVersion(4).
		SetConnectionAttemptHandler(func(u *url.URL, tc *tls.Config) *tls.Config { brokers.attempt(u); return tc }).
		SetCleanSession(false).SetAutoReconnect(false).SetConnectRetry(false).SetOrderMatters(true).
		SetKeepAlive(30*time.Second).SetConnectTimeout(10*time.Second).SetWriteTimeout(10*time.Second).
		SetBinaryWill(a.topics.Device(cfg.DeviceID, protocol.KindPresence),
			protocol.Encode(&protocol.Presence{Device: cfg.DeviceID, Online: false, Instance: cfg.Instance}), 1, true).
		SetOnConnectHandler(a.onConnect).SetDefaultPublishHandler(a.route).
		SetConnectionLostHandler(func(c mqtt.Client, err error) {
			if a.current() != c {
				return // a connection already replaced
			}
			a.log.Warn("hub connection lost", "broker", a.brokers.current(), "err", err)
			a.setConnected(false)
			poke(a.lost)
		})
	if cfg.TLS != nil {
		opts.SetTLSConfig(cfg.TLS)
	}
	if cfg.Username != "" {
		opts.SetUsername(cfg.Username).SetPassword(cfg.Password)
	}
	a.opts = opts
	opts.Servers = brokers.order()
	a.client = mqtt.NewClient(opts)
	return a, nil
}

// current is the client of the current connection.
func (a *Agent) current() mqtt.Client {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.client
}

// Stored returns the hub pods of the stored desired document, so they
// run from the start, even with no hub in reach (after a reboot). The
// daemon calls it once, before its first reconciliation.
//
// fence is the stored document's fence: it survives a reboot with the
// document, so the pods it names never start again here.
func (a *Agent) Stored() (gen int64, pods []*v1.Pod, fence []string, err error) {
	rec, ok, err := a.store.Desired()
	if err != nil || !ok {
		return 0, nil, nil, err
	}
	d, err := protocol.OpenDesired(rec.Document, a.cfg.DeviceID, a.cfg.HubKey, a.cfg.AllowUnsigned)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("the stored desired document (generation %d): %w", rec.Generation, err)
	}
	all, _ := protocol.DecodePods(d, manifest.Decode)
	pods = accepted(all, rec.Results)
	a.mu.Lock()
	a.applied = d.Generation
	a.floor = max(a.floor, d.Generation)
	a.mu.Unlock()
	a.lease.setPods(pods)
	return d.Generation, pods, fenceOf(d), nil
}

// fenceOf is a document's fence as the daemon takes it.
func fenceOf(d *protocol.Desired) []string {
	if d.Fence == nil {
		return nil
	}
	return d.Fence.Pods
}

// Run connects and reconnects until stop is closed, then says goodbye.
func (a *Agent) Run(stop <-chan struct{}) {
	var wg sync.WaitGroup
	defer wg.Wait() // none outlives Run: the caller closes the store next
	defer a.stopLogs()
	wg.Go(func() { a.drain(stop) })
	wg.Go(func() { a.heartbeats(stop) })
	wg.Go(func() { a.applyDesired(stop) })
	wg.Go(func() { a.renewals(stop) })
	if a.cfg.OnUpdateOrder != nil {
		wg.Go(func() { a.handOrders(stop) })
	}
	if a.objs.on {
		wg.Go(func() { a.objectRequests(stop) })
		if a.cfg.OnObjectsChanged != nil {
			wg.Go(func() { a.handChanges(stop) })
		}
	}
	delay := a.cfg.BackoffMin
	for {
		// A new client for every connection: paho's state machine, after
		// a session takeover and a subscription cut short, could stay
		// "connected or reconnecting" with no connection, and the device
		// deaf. The outbox and the retained documents carry what matters
		// across connections, not paho's in-memory session.
		a.mu.Lock()
		old := a.client
		a.opts.Servers = a.brokers.order()
		a.client = mqtt.NewClient(a.opts)
		c := a.client
		ready := make(chan struct{})
		a.clientReady = ready
		a.mu.Unlock()
		old.Disconnect(0)
		tok := c.Connect()
		tok.Wait()
		close(ready)
		if err := tok.Error(); err != nil {
			a.setConnected(false) // unreachable since the first failure
			wait := jitter(delay)
			a.log.Warn("cannot reach the hub; retrying", "broker", a.brokers.current(), "brokers", len(a.brokers.urls), "err", err, "in", wait.Round(time.Millisecond))
			if !sleep(stop, wait) {
				return
			}
			delay = min(2*delay, a.cfg.BackoffMax)
			continue
		}
		connectedAt := time.Now()
		if !a.connection(c, stop) {
			c.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindPresence), 1, true,
				protocol.Encode(&protocol.Presence{Device: a.cfg.DeviceID, Online: false, Instance: a.cfg.Instance})).WaitTimeout(2 * time.Second)
			c.Disconnect(500)
			return
		}
		a.setConnected(false)
		a.brokers.lost()
		delay = delayAfterLoss(delay, time.Since(connectedAt), a.cfg.BackoffMin, a.cfg.BackoffMax)
		wait := rand.N(delay)
		a.log.Info("reconnecting to the hub", "after", wait.Round(time.Millisecond))
		if !sleep(stop, wait) {
			return
		}
	}
}

// sleep waits d: false if stop closed first.
func sleep(stop <-chan struct{}, d time.Duration) bool {
	select {
	case <-stop:
		return false
	case <-time.After(d):
		return true
	}
}

// stableConnection is how long a connection must have lasted for its
// loss to start the reconnect delays over from BackoffMin.
const stableConnection = 30 * time.Second

// delayAfterLoss is the backoff delay once a connection that lasted
// lasted is lost: BackoffMin after a stable connection, else the delay
// the connection was made with, doubled. A broker that accepts a fleet
// and drops it again (a clustered broker overwhelmed by thousands of
// sessions at once) otherwise had every device back at once, for ever.
func delayAfterLoss(delay, lasted, minDelay, maxDelay time.Duration) time.Duration {
	if lasted >= stableConnection {
		return minDelay
	}
	return min(2*delay, maxDelay)
}

// connection waits while c is connected: false when stop closes, true
// when the connection is gone. paho may drop a connection without
// calling the lost handler (a takeover while it was disconnecting), so
// the client's own state is checked too.
func (a *Agent) connection(c mqtt.Client, stop <-chan struct{}) bool {
	check := time.NewTicker(time.Second)
	defer check.Stop()
	for {
		select {
		case <-stop:
			return false
		case <-a.lost:
			return true
		case <-check.C:
			if !c.IsConnectionOpen() {
				a.log.Warn("hub connection closed", "broker", a.brokers.current())
				return true
			}
		}
	}
}

// jitter spreads a fleet's retries of failed connections over ±25% of
// the delay. A lost connection is taken up again after a delay drawn
// from [0, delay) instead ("full jitter"): the fleet a broker dropped at
// once comes back spread over the whole delay, not in one burst.
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2))
}

// subscribeAgain tries a refused subscription again, 1 s doubling to
// 30 s, while c is the agent's connection and up.
func (a *Agent) subscribeAgain(c mqtt.Client, topic string, h mqtt.MessageHandler) {
	gone := make(chan struct{})
	granted := throttle.Retry(gone, time.Second, 30*time.Second, time.After, func() bool {
		if a.current() != c || !c.IsConnected() {
			close(gone) // the next connection subscribes again
			return false
		}
		tok := c.Subscribe(topic, 1, h)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			return false
		}
		_, refused := subackRefused(tok)
		return !refused
	})
	if granted {
		a.log.Info("the broker granted the subscription it refused", "topic", topic)
	}
}

// onConnect subscribes first and then learns the desired state (the
// retained document arrives with the subscription), announces the device
// and resends what the hub has not acknowledged. It subscribes at every
// connection, session present or not: a broker that gave the session to
// another client with this ID (a takeover, a cloned device) may have
// dropped the subscriptions, and the retained document is read again.
func (a *Agent) onConnect(c mqtt.Client) {
	a.mu.Lock()
	cur, ready := a.client, a.clientReady
	a.mu.Unlock()
	if cur != c {
		return // a connection already replaced
	}
	// paho calls this as the connection comes up and then resumes the
	// session's stored packets on its own goroutine; a publish or
	// subscribe made before that resume is over races with it (it sets
	// the DUP flag of a packet being written). Connect ends after it.
	<-ready
	id := a.cfg.DeviceID
	// In this order: the retained object index comes before the retained
	// desired document (each subscription's retained message arrives
	// before the next subscription is made, and handlers run in arrival
	// order), so the objects the pods reference are pending, not missing,
	// by the time the pods come.
	type sub struct {
		topic string
		h     mqtt.MessageHandler
	}
	var subs []sub
	if a.objs.on {
		subs = append(subs, sub{a.topics.Device(id, protocol.KindObjects), a.onObjectIndex},
			sub{a.topics.Device(id, protocol.KindObject), a.onObject})
	}
	subs = append(subs, sub{a.topics.Device(id, protocol.KindDesired), a.onDesired},
		sub{a.topics.Device(id, protocol.KindStatusAck), a.onStatusAck},
		sub{a.topics.HubPresence(), a.onHubPresence},
		sub{a.topics.Device(id, protocol.KindChunk), a.onChunk})
	if a.cfg.OnUpdateOrder != nil {
		subs = append(subs, sub{a.topics.Device(id, protocol.KindUpdate), a.onUpdate})
	}
	if a.logs.on {
		subs = append(subs, sub{a.topics.Device(id, protocol.KindLogsRequest), a.onLogsRequest})
	}
	// A new connection: the leases wait for its desired document, which
	// comes retained with the subscription.
	a.lease.connected()
	for _, s := range subs {
		tok := c.Subscribe(s.topic, 1, s.h)
		if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
			if a.current() == c {
				a.log.Warn("subscribing; reconnecting", "topic", s.topic, "err", tok.Error())
				poke(a.lost)
			}
			return
		}
		if code, refused := subackRefused(tok); refused {
			// Reconnecting would not help: tried again on this
			// connection (an ACL refuses for good; NATS refuses one it
			// could not set up in time under load).
			a.log.Error("the broker refused the subscription; trying again (an ACL refuses for good: check it for this device, docs/brokers.md)",
				"topic", s.topic, "suback", code)
			go a.subscribeAgain(c, s.topic, s.h)
		}
	}
	c.Publish(a.topics.Device(id, protocol.KindPresence), 1, true, protocol.Encode(&protocol.Presence{Device: id, Online: true, Instance: a.cfg.Instance}))
	a.announceSealKey(c)
	a.mu.Lock()
	a.connected, a.heard = true, a.now()
	a.setLinkLocked(true)
	a.win.rewind(a.now())
	a.connSeq++
	close(a.connWake)
	a.connWake = make(chan struct{})
	a.mu.Unlock()
	a.republishReport()
	poke(a.objs.wake) // ask for the objects still missing
	a.log.Info("connected to the hub", "broker", a.brokers.current(), "device", id)
	a.kick()
	poke(a.beat)
}

// route handles what the broker delivers before the subscriptions of a
// new client are in place (a persistent session's queued messages).
func (a *Agent) route(c mqtt.Client, m mqtt.Message) {
	id := a.cfg.DeviceID
	switch m.Topic() {
	case a.topics.Device(id, protocol.KindDesired):
		a.onDesired(c, m)
	case a.topics.Device(id, protocol.KindStatusAck):
		a.onStatusAck(c, m)
	case a.topics.HubPresence():
		a.onHubPresence(c, m)
	case a.topics.Device(id, protocol.KindChunk):
		a.onChunk(c, m)
	case a.topics.Device(id, protocol.KindUpdate):
		if a.cfg.OnUpdateOrder != nil {
			a.onUpdate(c, m)
		}
	case a.topics.Device(id, protocol.KindObjects):
		if a.objs.on {
			a.onObjectIndex(c, m)
		}
	case a.topics.Device(id, protocol.KindObject):
		if a.objs.on {
			a.onObject(c, m)
		}
	case a.topics.Device(id, protocol.KindLogsRequest):
		if a.logs.on {
			a.onLogsRequest(c, m)
		}
	}
}

// kick wakes the outbox drain.
func (a *Agent) kick() { poke(a.sendWake) }

func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (a *Agent) setConnected(v bool) {
	a.mu.Lock()
	a.connected = v
	a.setLinkLocked(v)
	a.mu.Unlock()
}

// Publish queues status and event items for the hub: stored first (one
// transaction for the batch), sent when connected.
func (a *Agent) Publish(items []store.Item) error {
	if err := a.store.Add(items); err != nil {
		return err
	}
	a.outboxAge.added(a.now())
	a.kick()
	return nil
}

func (a *Agent) publishAck(ack *protocol.Ack) {
	ack.Device = a.cfg.DeviceID
	a.current().Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindAck), 1, true, protocol.Encode(ack))
}

// applyAccepted hands the pods that passed every check, and the fence,
// to the daemon.
func (a *Agent) applyAccepted(d *protocol.Desired, pods []*v1.Pod, results []protocol.PodResult) {
	a.mu.Lock()
	a.applied = d.Generation
	a.mu.Unlock()
	run := accepted(pods, results)
	if a.lease.setPods(run) {
		poke(a.beat) // a heartbeat now, and the period the leases need from then on
	}
	a.pods.ApplyAssigned(d.Generation, run, fenceOf(d))
}

// accepted are the pods whose verdict is accepted.
func accepted(pods []*v1.Pod, results []protocol.PodResult) []*v1.Pod {
	refused := map[string]bool{}
	for _, r := range results {
		if !r.Accepted {
			refused[r.Namespace+"/"+r.Name] = true
		}
	}
	var run []*v1.Pod
	for _, p := range pods {
		if !refused[p.Namespace+"/"+p.Name] {
			run = append(run, p)
		}
	}
	return run
}

// marshalItem is a StatusItem whose pod or event is already JSON.
type marshalItem struct {
	Seq   int64           `json:"seq"`
	Key   string          `json:"key"`
	Pod   json.RawMessage `json:"pod,omitempty"`
	Event json.RawMessage `json:"event,omitempty"`
}
