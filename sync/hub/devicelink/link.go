// Package devicelink is the hub's MQTT link to its devices: it publishes
// each device's signed desired document (retained), and stores what
// devices send back (acks, mirror pod statuses exactly once in effect,
// events, heartbeats, presence) in the fleet database, refusing what a
// device could not have sent.
package devicelink

import (
	"crypto/ed25519"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/chunks"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/objectlink"
	"github.com/podvisor/podvisor/sync/hub/releases"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/throttle"
)

// Config is how the link reaches the broker and signs.
type Config struct {
	Broker string // mqtt://host:port or mqtts://host:port
	// Brokers are further nodes of the same broker cluster: paho tries
	// Broker then these, in order, at every (re)connection.
	Brokers  []string
	ClientID string // default "podhub"
	Prefix   string
	Key      ed25519.PrivateKey
	TLS      *tls.Config
	Username string
	Password string
	// Connect makes the MQTT client from the options (default paho's);
	// podhub serve passes its embedded broker's HubClient.
	Connect func(*mqtt.ClientOptions) mqtt.Client
	// DeviceTimeout is how long a device may be silent and still be
	// Ready (default fleetdb.DefaultDeviceTimeout); the scheduler taints
	// it unreachable after.
	DeviceTimeout time.Duration
	// Now is the clock (default time.Now); tests pass a fake one.
	Now func() time.Time
	// Changed is called after a report that may change what the
	// scheduler reads (the scheduler's Reschedule); default none.
	Changed func()
	// UpdateChanged is called after a report that may move an update (an
	// update report, a presence, a heartbeat with another version); the
	// update driver's Kick. Default none.
	UpdateChanged func()
	// ReleaseDir holds the releases' artifacts (releases.Store), which the
	// chunk server sends; Chunks bounds it. No ReleaseDir: no chunk server.
	ReleaseDir string
	Chunks     chunks.Config
	// ObjectSource is the hub's ConfigMaps and Secrets, which the object
	// link (sync/hub/objectlink) gives devices (nil: none); ObjectLimits
	// bound each device (zero: objectlink.DefaultLimits).
	ObjectSource objects.Getter
	ObjectLimits objectlink.Limits
	// Objects is told of each device's new desired pods and of every
	// connection, and handed the devices' object requests and sealing
	// keys (hub.New sets it to its object link). Nil: none.
	Objects Objects
	// Observe is told what the link stores and refuses (hubmetrics'
	// counters); nil: nobody.
	Observe Observer
	// Logs takes the devices' log frames (logs.go); nil: none.
	Logs LogFrames
	// Owners says which devices this replica handles (owners.go); nil:
	// every device (a lone podhub).
	Owners Owners
	// EndSession has Close end the hub's persistent session at the
	// broker (a replica that stops for good under its own client ID).
	EndSession bool
}

// Objects is the object link as the device link sees it.
type Objects interface {
	// PrepareDesired is told of the next desired pods of devices, stored
	// and not yet published: it publishes the index of the objects they
	// reference first (objectlink.Link.PrepareDesired), and returns when
	// it has.
	PrepareDesired(next map[string][]json.RawMessage)
	DesiredChanged(device string, pods []json.RawMessage)
	Connected()
	// Gained is told of devices this replica now handles (in says
	// which): it reads them again.
	Gained(in func(device string) bool)
	ObjectGet(device string, payload []byte)
	SealKey(device string, payload []byte)
}

// Link serves the fleet over MQTT. Its messages are handled one at a time
// in arrival order (paho's OrderMatters), so a device's batches are
// stored in the order it sent them.
type Link struct {
	cfg Config
	// watch holds the desired publishes the broker has not answered yet
	// (stalled.go).
	watch pubWatch
	// catchUps throttles each device's catch-ups (catchup.go).
	catchUps catchUpGate
	// attempt is the broker URL of the last connection attempt (the
	// connected one after a success), for logs; connectedTo is the last
	// one connected to.
	attempt, connectedTo atomic.Value
	topics               protocol.Topics
	fleet                *fleetdb.Fleet
	log                  *slog.Logger
	client               mqtt.Client
	now                  func() time.Time
	// refused counts refused messages: the first few of each minute are
	// logged and kept as the device's events, the rest summed up.
	refused *throttle.Counter
	done    chan struct{}
	// updating serialises desired-document updates (API, acks and the
	// scheduler each make the next generation) and a reconnect's
	// republishing of every document, so no older one is published last.
	updating sync.Mutex
	// seen is each device's heartbeat as the scheduler reads it, so that
	// only a heartbeat that changes it asks for a pass.
	seen sync.Map
	// versions are the devices' running versions as last heard, so a
	// heartbeat with another asks the update driver for a pass.
	versions sync.Map
	orders   orders
	releases releases.Store
	chunks   *chunks.Server
	// own is the device ownership's state (owners.go).
	own ownership
	// opts are the client's options (Close's endSession copies them).
	opts *mqtt.ClientOptions
}

// New makes a link; Connect connects it.
func New(cfg Config, fleet *fleetdb.Fleet, log *slog.Logger) *Link {
	if cfg.ClientID == "" {
		cfg.ClientID = "podhub"
	}
	if cfg.DeviceTimeout <= 0 {
		cfg.DeviceTimeout = fleetdb.DefaultDeviceTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Changed == nil {
		cfg.Changed = func() {}
	}
	if cfg.UpdateChanged == nil {
		cfg.UpdateChanged = func() {}
	}
	h := &Link{cfg: cfg, topics: protocol.Topics{Prefix: cfg.Prefix}, fleet: fleet, log: log, now: cfg.Now,
		refused: throttle.New(10, time.Minute, nil), done: make(chan struct{}), releases: releases.Store{Dir: cfg.ReleaseDir}}
	if cfg.ReleaseDir != "" {
		h.chunks = chunks.New(cfg.Chunks, h, h.sendChunk, log)
	}
	opts := mqtt.NewClientOptions().AddBroker(cfg.Broker).SetClientID(cfg.ClientID).SetProtocolVersion(4).
		SetConnectionAttemptHandler(func(u *url.URL, tc *tls.Config) *tls.Config { h.attempt.Store(u.String()); return tc }).
		SetReconnectingHandler(h.reconnecting).
		SetBinaryWill(h.topics.HubPresence(), protocol.Encode(&protocol.Presence{Online: false}), 1, true).
		SetCleanSession(false).SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(time.Second).
		SetMaxReconnectInterval(30 * time.Second).SetOrderMatters(true).SetKeepAlive(30 * time.Second).
		// A CONNECT that a broker accepted but never answers (one going
		// down or coming up as it arrived) is given up after this, not
		// paho's 30 s, so the hub is back soon after its broker is; the
		// devices' link does the same.
		SetConnectTimeout(10 * time.Second).
		SetOnConnectHandler(h.onConnect).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { log.Warn("broker connection lost", "broker", h.broker(), "err", err) })
	for _, b := range cfg.Brokers {
		opts.AddBroker(b)
	}
	if cfg.TLS != nil {
		opts.SetTLSConfig(cfg.TLS)
	}
	if cfg.Username != "" {
		opts.SetUsername(cfg.Username).SetPassword(cfg.Password)
	}
	if cfg.Connect == nil {
		cfg.Connect = mqtt.NewClient
	}
	h.cfg.Connect = cfg.Connect
	h.opts = opts
	h.client = cfg.Connect(opts)
	return h
}

// Connect connects to the broker, waiting at most wait for the first
// connection (it keeps trying in the background).
func (h *Link) Connect(wait time.Duration) error {
	go h.summarise()
	go h.watchPublishes()
	tok := h.client.Connect()
	if !tok.WaitTimeout(wait) {
		h.log.Warn("broker not reachable yet; still trying", "broker", h.broker(), "brokers", 1+len(h.cfg.Brokers))
		return nil
	}
	return tok.Error()
}

// Close disconnects (ending the broker session if Config.EndSession).
func (h *Link) Close() {
	h.client.Disconnect(500)
	if h.cfg.EndSession {
		opts := *h.opts
		h.endSession(&opts)
	}
	if h.chunks != nil {
		h.chunks.Close()
	}
	select {
	case <-h.done:
	default:
		close(h.done)
	}
}

// broker is the broker of the last connection attempt (the configured
// first before any).
func (h *Link) broker() string {
	if u, ok := h.attempt.Load().(string); ok {
		return u
	}
	return h.cfg.Broker
}

// reconnecting orders the brokers before each reconnection: the one
// after the broker the hub was last connected to first, so a node that
// died is tried last (a dead host costs a connect timeout).
func (h *Link) reconnecting(_ mqtt.Client, o *mqtt.ClientOptions) {
	last, _ := h.connectedTo.Load().(string)
	o.Servers = rotatePast(o.Servers, last)
}

// rotatePast is servers in their cyclic order starting after last
// (unchanged if last is not among them).
func rotatePast(servers []*url.URL, last string) []*url.URL {
	for i, u := range servers {
		if u.String() == last {
			next := (i + 1) % len(servers)
			return append(append([]*url.URL(nil), servers[next:]...), servers[:next]...)
		}
	}
	return servers
}

// summarise logs, once a minute, how many refused messages were only
// counted.
func (h *Link) summarise() {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-tick.C:
			if n := h.refused.Flush(); n > 0 {
				h.log.Warn("refused more messages", "count", n, "total", h.refused.Total())
			}
		}
	}
}

// onConnect subscribes to every device's reports and publishes every
// desired document again (a broker that lost its retained messages gets
// them back; devices ignore a generation they have). A replica handles
// its own devices' retained reports, publishes only their documents,
// and hears the hub's presence (owners.go).
func (h *Link) onConnect(c mqtt.Client) {
	h.connectedTo.Store(h.broker())
	h.own.mu.Lock()
	h.own.connected = h.now()
	h.own.mu.Unlock()
	h.own.replay.Store(nil)
	h.subscribe(c, nil)
	if h.cfg.Owners != nil {
		h.subscribeTo(c, h.topics.HubPresence(), h.hubPresenceHandler)
	}
	h.announce(c)
	// The object indexes first, as for every update: a device that reads
	// both again finds its pods' objects listed.
	if h.cfg.Objects != nil {
		h.cfg.Objects.Connected()
	}
	// Under the update lock: an update stored after this read but published
	// before this loop would otherwise be overwritten at the broker by the
	// older document read here, and the device would never see it.
	h.updating.Lock()
	docs, err := h.fleet.AllDesired()
	if err != nil {
		h.updating.Unlock()
		h.log.Error("reading desired documents", "err", err)
		return
	}
	published := 0
	for _, d := range docs {
		if h.owns(d.Device) {
			h.publishDesired(c, d.Device, d.Document)
			published++
		}
	}
	h.updating.Unlock()
	orders := h.publishOrders(c)
	h.log.Info("connected to the broker", "broker", h.broker(), "desired", published, "updateOrders", orders)
}

// handlers are the link's handlers of the devices' reports, by kind
// (nil: not handled), the ownership filter around all but the logs (the
// replica that opened a log stream reads its frames; the others ignore
// stream IDs they do not know).
func (h *Link) handlers() map[string]mqtt.MessageHandler {
	return map[string]mqtt.MessageHandler{
		protocol.KindStatus: h.owned(report(h, "status batch", protocol.DecodeStatusBatch,
			func(b *protocol.StatusBatch) string { return b.Device }, h.saveStatus)),
		protocol.KindAck:       h.owned(report(h, "ack", protocol.DecodeAck, func(a *protocol.Ack) string { return a.Device }, h.saveAck)),
		protocol.KindHeartbeat: h.owned(report(h, "heartbeat", protocol.DecodeHeartbeat, func(hb *protocol.Heartbeat) string { return hb.Device }, h.saveHeartbeat)),
		protocol.KindPresence:  h.owned(h.presenceHandler()),
		protocol.KindUpdateState: h.owned(report(h, "update state", protocol.DecodeUpdateState,
			func(s *protocol.UpdateState) string { return s.Device }, h.saveUpdateState)),
		protocol.KindFetch:     h.owned(h.fetchHandler),
		protocol.KindObjectGet: h.owned(h.objectsHandler(func(o Objects) func(string, []byte) { return o.ObjectGet })),
		protocol.KindSealKey:   h.owned(h.objectsHandler(func(o Objects) func(string, []byte) { return o.SealKey })),
		protocol.KindLogs:      h.logsHandler(),
	}
}

// subscribe subscribes to the reports of kinds (nil: every kind the
// link handles). A SUBSCRIBE to a filter the session has replaces it and
// sends its retained messages again (MQTT 3.1.1 §3.8.4).
func (h *Link) subscribe(c mqtt.Client, kinds []string) {
	all := h.handlers()
	if kinds == nil {
		for kind := range all {
			kinds = append(kinds, kind)
		}
	}
	for _, kind := range kinds {
		if handler := all[kind]; handler != nil {
			h.subscribeTo(c, h.topics.All(kind), handler)
		}
	}
}

// subscribeTo subscribes to filter, logging a failure or a refusal. A
// refused subscription is tried again in the background (1 s doubling
// to 30 s) while the connection is up: an ACL refuses for good, but NATS
// refuses one it could not set up in time under load, and a hub without
// one kind of report would never hear it.
func (h *Link) subscribeTo(c mqtt.Client, filter string, handler mqtt.MessageHandler) {
	switch refused, err := h.trySubscribe(c, filter, handler); {
	case err != nil:
		h.log.Error("subscribing", "topic", filter, "err", err)
	case refused != 0:
		h.log.Error("the broker refused the subscription; trying again (an ACL refuses for good: check it for the hub, docs/brokers.md)",
			"topic", filter, "suback", refused)
		go func() {
			if throttle.Retry(h.done, time.Second, 30*time.Second, time.After, func() bool {
				refused, err := h.trySubscribe(c, filter, handler)
				return refused == 0 && err == nil || !c.IsConnected() // a reconnection subscribes again
			}) && c.IsConnected() {
				h.log.Info("the broker granted the subscription it refused", "topic", filter)
			}
		}()
	}
}

// trySubscribe subscribes to filter once: the SUBACK's refusal code
// (0x80 and up; paho reports a refusal as success) or an error.
func (h *Link) trySubscribe(c mqtt.Client, filter string, handler mqtt.MessageHandler) (refused byte, err error) {
	tok := c.Subscribe(filter, 1, handler)
	if tok.Wait() && tok.Error() != nil {
		return 0, tok.Error()
	}
	if st, ok := tok.(*mqtt.SubscribeToken); ok && st.Result()[filter] >= 0x80 {
		return st.Result()[filter], nil
	}
	return 0, nil
}

// objectsHandler hands a device's object message to the object link
// (nil without one).
func (h *Link) objectsHandler(pick func(Objects) func(string, []byte)) mqtt.MessageHandler {
	if h.cfg.Objects == nil {
		return nil
	}
	handle := pick(h.cfg.Objects)
	return func(_ mqtt.Client, m mqtt.Message) {
		if dev, ok := h.device(m); ok {
			handle(dev, m.Payload())
		}
	}
}

// Publish publishes on the broker without waiting (QoS 1).
func (h *Link) Publish(topic string, retained bool, payload []byte) {
	h.client.Publish(topic, 1, retained, payload)
}
