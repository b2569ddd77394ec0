package devicelink

import (
	"crypto/rand"
	"encoding/hex"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Owners says which devices this replica handles, among several on one
// store and one broker (replica.Elector is one): every replica receives
// every device's reports, and each handles only those of the devices it
// owns, in order; the others drop them. Nil in Config: this hub handles
// every device (a lone podhub).
type Owners interface {
	// WithOwned runs handle if this replica owns device now, holding
	// the ownership meanwhile (a release waits for it), and reports
	// whether it ran.
	WithOwned(device string, handle func()) bool
	// Owns reports whether this replica owns device now.
	Owns(device string) bool
}

// retainedKinds are the reports devices keep retained on the broker:
// a subscription sends them again, which is how a replica that gains
// devices learns their last ack, presence, update state and sealing key.
var retainedKinds = []string{protocol.KindAck, protocol.KindPresence, protocol.KindUpdateState, protocol.KindSealKey}

// gainEvery bounds how often a replica that gains buckets subscribes
// again and announces a new session: gains coalesce.
const gainEvery = 2 * time.Second

// ownership is the link's side of device ownership.
type ownership struct {
	// replay is the buckets whose retained deliveries are handled: nil
	// for every owned device (the connection's first subscription, and
	// gains within replayFor of it), the buckets of the recent gains
	// after a later gain.
	replay atomic.Pointer[replica.Ownership]
	// dropped counts the messages of devices another replica owns.
	dropped atomic.Int64

	mu      sync.Mutex
	pending []int     // buckets gained, not yet subscribed again for
	last    time.Time // the last subscription again
	timer   *time.Timer
	// recent is the gains subscribed again for within replayFor: their
	// retained deliveries may still be on the way when the next gain
	// subscribes again, and stay handled.
	recent []gained
	// connected is when the connection's first subscription (every
	// owned bucket) was made: its retained deliveries may still be on
	// the way when a gain subscribes again, and stay handled.
	connected time.Time
}

// gained is one subscription again's buckets and when it was made.
type gained struct {
	at      time.Time
	buckets []int
}

// replayFor is how long the retained deliveries of a gain stay handled
// after its subscription again (they come at once; a broker's backlog
// may hold them back a while).
const replayFor = 30 * time.Second

// SetOwners makes the link one replica's of several (Config.Owners):
// call before Connect.
func (h *Link) SetOwners(o Owners) { h.cfg.Owners = o }

// owns reports whether the link handles device (no Owners: all).
func (h *Link) owns(device string) bool {
	return h.cfg.Owners == nil || h.cfg.Owners.Owns(device)
}

// owned wraps a report handler with the ownership filter: a message of
// a device another replica owns is dropped (counted), a retained one is
// handled only for the buckets being replayed, and the handling holds
// the ownership (WithOwned). Without Owners, handler as it is.
func (h *Link) owned(handler mqtt.MessageHandler) mqtt.MessageHandler {
	if h.cfg.Owners == nil || handler == nil {
		return handler
	}
	return func(c mqtt.Client, m mqtt.Message) {
		dev, _, err := h.topics.Parse(m.Topic())
		if err != nil {
			handler(c, m) // refused and logged there
			return
		}
		if m.Retained() {
			if r := h.own.replay.Load(); r != nil && !r.Has(replica.Bucket(dev)) {
				h.notOwned(m)
				return
			}
		}
		if !h.cfg.Owners.WithOwned(dev, func() { handler(c, m) }) {
			h.notOwned(m)
		}
	}
}

// notOwned counts a message left to the replica owning its device.
func (h *Link) notOwned(m mqtt.Message) {
	h.own.dropped.Add(1)
	h.observer().MessageNotOwned(h.topicKind(m))
}

// Dropped is how many device messages the link dropped because another
// replica owns their device.
func (h *Link) Dropped() int64 { return h.own.dropped.Load() }

// OwnersChanged is told of the buckets this replica gained and lost
// (replica.Elector.WatchOwners). Gains coalesce, at most one every
// gainEvery: the link subscribes again to the retained kinds, handling
// the retained deliveries of the gained buckets only, announces a new
// hub session (every device resends what it sent and was not receipted:
// what the previous owner took and never stored comes again), and has
// the object link read the gained devices again.
func (h *Link) OwnersChanged(gained, lost []int) {
	if len(gained) == 0 {
		return
	}
	h.own.mu.Lock()
	defer h.own.mu.Unlock()
	h.own.pending = append(h.own.pending, gained...)
	if h.own.timer != nil {
		return // one is due
	}
	wait := max(0, gainEvery-h.now().Sub(h.own.last))
	if h.own.last.IsZero() {
		wait = 0
	}
	h.own.timer = time.AfterFunc(wait, h.gain)
}

// gain is OwnersChanged's coalesced work.
func (h *Link) gain() {
	h.own.mu.Lock()
	buckets := h.own.pending
	now := h.now()
	h.own.pending, h.own.timer, h.own.last = nil, nil, now
	// The buckets replayed: this gain's and those of the gains before it
	// whose retained deliveries may still be coming.
	recent := []gained{{now, buckets}}
	for _, g := range h.own.recent {
		if now.Sub(g.at) < replayFor {
			recent = append(recent, g)
		}
	}
	h.own.recent = recent
	var replay []int
	for _, g := range recent {
		replay = append(replay, g.buckets...)
	}
	// Every owned bucket's while the connection's own deliveries may
	// still be coming.
	sinceConnect := now.Sub(h.own.connected) < replayFor
	h.own.mu.Unlock()
	select {
	case <-h.done:
		return
	default:
	}
	if !h.client.IsConnected() {
		return // onConnect handles every owned device
	}
	set := new(replica.Ownership).With(buckets, true, time.Time{})
	if !sinceConnect {
		h.own.replay.Store(new(replica.Ownership).With(replay, true, time.Time{}))
	}
	h.subscribe(h.client, retainedKinds)
	h.announce(h.client)
	if h.cfg.Objects != nil {
		h.cfg.Objects.Gained(func(dev string) bool { return set.Has(replica.Bucket(dev)) })
	}
	h.log.Info("devices gained: subscribed again to their retained reports and announced a new hub session", "buckets", len(buckets))
}

// announce publishes the hub's presence, online with a new session:
// devices resend what they sent and were not receipted.
func (h *Link) announce(c mqtt.Client) {
	session := make([]byte, 8)
	rand.Read(session)
	c.Publish(h.topics.HubPresence(), 1, true, protocol.Encode(&protocol.Presence{Online: true, Session: hex.EncodeToString(session)}))
}

// hubPresenceHandler hears the hub's presence (replicas only): another
// replica's last will (offline) heard while this one is connected makes
// it announce the hub online again, so devices never take the hub for
// gone while a replica lives.
func (h *Link) hubPresenceHandler(c mqtt.Client, m mqtt.Message) {
	p, err := protocol.DecodePresence(m.Payload())
	if err != nil || p.Online || !c.IsConnected() {
		return
	}
	h.log.Info("another replica's connection ended (its last will): announcing the hub online again")
	// Not on this handler's goroutine: the embedded broker's in-process
	// client delivers the announcement to this very subscription, through
	// the queue this goroutine empties.
	go h.announce(c)
}

// endSession ends the hub's persistent session at the broker (a
// replica handing over at a stop): a connection with a clean session,
// at once closed, so the broker stops queueing the hub's subscriptions
// for a client ID that will not come back (MQTT 3.1.1 §3.1.2.4).
func (h *Link) endSession(opts *mqtt.ClientOptions) {
	opts.SetCleanSession(true).SetAutoReconnect(false).SetConnectRetry(false).SetOnConnectHandler(nil).
		SetConnectionLostHandler(nil).SetReconnectingHandler(nil).SetWill("", "", 0, false)
	opts.WillEnabled = false
	c := h.cfg.Connect(opts)
	tok := c.Connect()
	if !tok.WaitTimeout(5*time.Second) || tok.Error() != nil {
		h.log.Warn("ending the hub's broker session", "err", tok.Error())
		return
	}
	c.Disconnect(250)
	h.log.Info("ended the hub's persistent broker session", "clientID", h.cfg.ClientID)
}
