// Package devicelink is the hub's MQTT link to its devices: it publishes
// each device's signed desired document (retained), and stores what
// devices send back (acks, mirror pod statuses exactly once in effect,
// events, heartbeats, presence) in the fleet database, refusing what a
// device could not have sent.
package devicelink

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/pod/manifest"
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
	Broker   string // mqtt://host:port or mqtts://host:port
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
	ObjectGet(device string, payload []byte)
	SealKey(device string, payload []byte)
}

// Link serves the fleet over MQTT. Its messages are handled one at a time
// in arrival order (paho's OrderMatters), so a device's batches are
// stored in the order it sent them.
type Link struct {
	cfg    Config
	topics protocol.Topics
	fleet  *fleetdb.Fleet
	log    *slog.Logger
	client mqtt.Client
	now    func() time.Time
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
	opts := mqtt.NewClientOptions().AddBroker(cfg.Broker).SetClientID(cfg.ClientID).
		SetBinaryWill(h.topics.HubPresence(), protocol.Encode(&protocol.Presence{Online: false}), 1, true).
		SetCleanSession(false).SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(time.Second).
		SetMaxReconnectInterval(30 * time.Second).SetOrderMatters(true).SetKeepAlive(30 * time.Second).
		// A CONNECT that a broker accepted but never answers (one going
		// down or coming up as it arrived) is given up after this, not
		// paho's 30 s, so the hub is back soon after its broker is; the
		// devices' link does the same.
		SetConnectTimeout(10 * time.Second).
		SetOnConnectHandler(h.onConnect).
		SetConnectionLostHandler(func(_ mqtt.Client, err error) { log.Warn("broker connection lost", "err", err) })
	if cfg.TLS != nil {
		opts.SetTLSConfig(cfg.TLS)
	}
	if cfg.Username != "" {
		opts.SetUsername(cfg.Username).SetPassword(cfg.Password)
	}
	if cfg.Connect == nil {
		cfg.Connect = mqtt.NewClient
	}
	h.client = cfg.Connect(opts)
	return h
}

// Connect connects to the broker, waiting at most wait for the first
// connection (it keeps trying in the background).
func (h *Link) Connect(wait time.Duration) error {
	go h.summarise()
	tok := h.client.Connect()
	if !tok.WaitTimeout(wait) {
		h.log.Warn("broker not reachable yet; still trying", "broker", h.cfg.Broker)
		return nil
	}
	return tok.Error()
}

// Close disconnects.
func (h *Link) Close() {
	h.client.Disconnect(500)
	if h.chunks != nil {
		h.chunks.Close()
	}
	select {
	case <-h.done:
	default:
		close(h.done)
	}
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
// them back; devices ignore a generation they have).
func (h *Link) onConnect(c mqtt.Client) {
	for kind, handler := range map[string]mqtt.MessageHandler{
		protocol.KindStatus: report(h, "status batch", protocol.DecodeStatusBatch,
			func(b *protocol.StatusBatch) string { return b.Device }, h.saveStatus),
		protocol.KindAck:       report(h, "ack", protocol.DecodeAck, func(a *protocol.Ack) string { return a.Device }, h.saveAck),
		protocol.KindHeartbeat: report(h, "heartbeat", protocol.DecodeHeartbeat, func(hb *protocol.Heartbeat) string { return hb.Device }, h.saveHeartbeat),
		protocol.KindPresence: report(h, "presence", protocol.DecodePresence, func(p *protocol.Presence) string { return p.Device },
			func(dev string, p *protocol.Presence) error {
				dup, err := h.fleet.SavePresence(dev, p, h.now())
				h.duplicate(dev, dup)
				h.cfg.Changed()
				h.cfg.UpdateChanged()
				return err
			}),
		protocol.KindUpdateState: report(h, "update state", protocol.DecodeUpdateState,
			func(s *protocol.UpdateState) string { return s.Device }, h.saveUpdateState),
		protocol.KindFetch:     h.fetchHandler,
		protocol.KindObjectGet: h.objectsHandler(func(o Objects) func(string, []byte) { return o.ObjectGet }),
		protocol.KindSealKey:   h.objectsHandler(func(o Objects) func(string, []byte) { return o.SealKey }),
	} {
		if handler == nil {
			continue
		}
		if tok := c.Subscribe(h.topics.All(kind), 1, handler); tok.Wait() && tok.Error() != nil {
			h.log.Error("subscribing", "topic", h.topics.All(kind), "err", tok.Error())
		}
	}
	session := make([]byte, 8)
	rand.Read(session)
	c.Publish(h.topics.HubPresence(), 1, true, protocol.Encode(&protocol.Presence{Online: true, Session: hex.EncodeToString(session)}))
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
	for _, d := range docs {
		c.Publish(h.topics.Device(d.Device, protocol.KindDesired), 1, true, d.Document)
	}
	h.updating.Unlock()
	orders := h.publishOrders(c)
	h.log.Info("connected to the broker", "broker", h.cfg.Broker, "desired", len(docs), "updateOrders", orders)
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

// device parses a report's topic, logging what is wrong with it.
func (h *Link) device(m mqtt.Message) (string, bool) {
	dev, _, err := h.topics.Parse(m.Topic())
	if err != nil {
		h.log.Warn("ignored a message", "err", err)
		return "", false
	}
	return dev, true
}

// reject counts a refused message. The first few of each minute are
// logged and recorded as the device's events (a device the fleet knows),
// so `podhub describe device` shows them; the rest are summed up in one
// line and one event, so a flood costs neither the log nor fleet.db.
func (h *Link) reject(dev string, m mqtt.Message, err error) {
	h.observeRefused(m)
	log, suppressed := h.refused.Note()
	if suppressed > 0 {
		h.log.Warn("refused more messages", "count", suppressed, "total", h.refused.Total())
		h.fleet.SaveRejection(dev, fmt.Sprintf("%d more messages refused across the fleet in the last minute (counted, not kept one by one)", suppressed), h.now())
	}
	if !log {
		return
	}
	h.log.Warn("refused a message", "device", dev, "topic", m.Topic(), "err", err)
	h.fleet.SaveRejection(dev, fmt.Sprintf("%s: %v", m.Topic(), err), h.now())
}

// refusal says whether a save failed on what the message claims (to be
// refused and counted) rather than on the database.
func refusal(err error) bool {
	return errors.Is(err, fleetdb.ErrUnknownDevice) || errors.Is(err, fleetdb.ErrNotPublished) || errors.Is(err, fleetdb.ErrNotOrdered) || errors.Is(err, errLabelsDropped)
}

var errLabelsDropped = errors.New("labels outside " + protocol.DeviceLabelPrefix + " dropped: a device sets only its own labels")

// saveAck records an ack, and resyncs a device that went back to an
// older generation (its state was reset, or an old document replayed).
// It happens once per regression: a forged ack cannot make the hub sign
// again until the device has acknowledged something newer.
func (h *Link) saveAck(dev string, a *protocol.Ack) error {
	regressed, err := h.fleet.SaveAck(a, h.now())
	if err == nil {
		h.cfg.Changed() // a terminating pod may be confirmed stopped
	}
	if err != nil || !regressed {
		return err
	}
	gen, err := h.Update(dev, func(current []json.RawMessage) []json.RawMessage { return current })
	if err != nil {
		return fmt.Errorf("resyncing: %w", err)
	}
	h.log.Warn("the device went back to an older generation; published its pods again, newer", "device", dev,
		"observed", a.ObservedGeneration, "generation", gen)
	return nil
}

// saveHeartbeat records a heartbeat and answers it with the device's
// receipt, so a device that hears nothing back knows its connection no
// longer delivers; labels a device may not set are dropped, and that
// refusal counted.
func (h *Link) saveHeartbeat(dev string, hb *protocol.Heartbeat) error {
	dropped, dup, err := h.fleet.SaveHeartbeat(hb, h.now())
	h.duplicate(dev, dup)
	if err == nil {
		h.observer().HeartbeatStored()
		// Only a heartbeat that changes what the scheduler reads asks for
		// a pass (a stale device is found by the scheduler's timer).
		if fp := schedFingerprint(hb); h.seenChanged(dev, fp) {
			h.cfg.Changed()
		}
		if old, ok := h.versions.Swap(dev, hb.Version); !ok || old != hb.Version {
			h.cfg.UpdateChanged()
		}
		epoch, seq, cerr := h.fleet.Cursor(dev)
		if cerr != nil {
			return cerr
		}
		// The receipt echoes the heartbeat's number: the device renews its
		// self-fencing leases from that heartbeat's send time.
		h.client.Publish(h.topics.Device(dev, protocol.KindStatusAck), 1, false, protocol.Encode(&protocol.StatusAck{Epoch: epoch, Seq: seq, Beat: hb.Beat}))
	}
	if err == nil && len(dropped) > 0 {
		err = fmt.Errorf("%w: %s", errLabelsDropped, strings.Join(dropped, ", "))
	}
	return err
}

// schedFingerprint is what the scheduler reads of a heartbeat: labels,
// allocatable, conditions' statuses, architecture and OS. (A device
// going silent or offline asks by itself: presence and the stale timer.)
func schedFingerprint(hb *protocol.Heartbeat) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(hb.Labels)) {
		fmt.Fprintf(&b, "%s=%s,", k, hb.Labels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(hb.Node.Allocatable)) {
		q := hb.Node.Allocatable[k]
		fmt.Fprintf(&b, "%s:%s,", k, q.String())
	}
	for _, c := range hb.Node.Conditions {
		fmt.Fprintf(&b, "%s/%s,", c.Type, c.Status)
	}
	fmt.Fprintf(&b, "%s/%s", hb.Node.NodeInfo.Architecture, hb.Node.NodeInfo.OperatingSystem)
	return b.String()
}

// seenChanged records a device's scheduling fingerprint and says whether
// it changed (or is the first since the hub started).
// A heartbeat after a silence of over half the timeout asks too: the
// device may have been stale, and is Ready again.
func (h *Link) seenChanged(dev, fp string) bool {
	now := h.now()
	old, ok := h.seen.Swap(dev, seenHeartbeat{fp, now})
	if !ok {
		return true
	}
	prev := old.(seenHeartbeat)
	return prev.fingerprint != fp || now.Sub(prev.at) > h.cfg.DeviceTimeout/2
}

type seenHeartbeat struct {
	fingerprint string
	at          time.Time
}

// duplicate logs a device ID found shared by two installations.
func (h *Link) duplicate(dev string, found bool) {
	if found {
		h.log.Warn("two devices report under one device ID; shown DuplicateID", "device", dev)
	}
}

// report makes the handler of one kind of device report: the topic names
// the device, the payload must decode and name the same device; a refused
// one is recorded, an accepted one saved. Empty payloads (a cleared
// retained message) are ignored.
func report[T any](h *Link, what string, decode func([]byte) (*T, error), deviceOf func(*T) string, save func(dev string, v *T) error) mqtt.MessageHandler {
	return func(_ mqtt.Client, m mqtt.Message) {
		dev, ok := h.device(m)
		if !ok || len(m.Payload()) == 0 {
			return
		}
		v, err := decode(m.Payload())
		if err == nil {
			if named := deviceOf(v); named != dev {
				err = fmt.Errorf("%s names device %q", what, named)
			}
		}
		if err != nil {
			h.reject(dev, m, err)
			return
		}
		if err := save(dev, v); refusal(err) {
			h.reject(dev, m, err)
		} else if err != nil {
			h.log.Error("storing a "+what, "device", dev, "err", err)
		}
	}
}

// saveStatus stores a batch and sends the device its receipt. A failure
// sends none: the device sends the batch again.
func (h *Link) saveStatus(dev string, b *protocol.StatusBatch) error {
	r, err := h.fleet.StoreStatus(b, h.now())
	if err != nil {
		return err
	}
	h.observer().StatusItemsStored(r.Applied)
	if r.HubPodsChanged {
		// A hub pod became Ready or not, failed, or went: the controllers
		// may decide otherwise (passes coalesce, at most one a second).
		h.cfg.Changed()
	}
	h.client.Publish(h.topics.Device(dev, protocol.KindStatusAck), 1, false, protocol.Encode(&protocol.StatusAck{Epoch: b.Epoch, Seq: r.Cursor, Resend: r.Gap}))
	return nil
}

// Apply adds or replaces pods (by namespace/name) in a device's desired
// state, as the next generation, signed and published retained. Pods are
// checked as the device will check them: any invalid pod refuses the
// whole apply, with every reason.
func (h *Link) Apply(device string, pods []json.RawMessage) (int64, error) {
	gens, err := h.ApplyTo([]string{device}, pods)
	if len(gens) == 1 {
		return gens[0], err
	}
	return 0, err
}

// ApplyTo is Apply to each of devices, in order: the pods are checked
// once, and the documents stored a batch per transaction and published
// once stored. It stops at the first device whose document cannot be
// made; gens holds the generations of the devices before it.
func (h *Link) ApplyTo(devices []string, pods []json.RawMessage) (gens []int64, err error) {
	if err := checkApplied(pods); err != nil {
		return nil, err
	}
	for _, dev := range devices {
		f, err := h.fleet.Fence(dev)
		switch {
		case err != nil && !errors.Is(err, fleetdb.ErrNotFound):
			return nil, fmt.Errorf("device %s: reading its fence: %w", dev, err)
		case err == nil && f.Fenced():
			return nil, fmt.Errorf("device %s is fenced (podhub fence device): it gets no pods until the fence is lifted", dev)
		}
	}
	replaced := map[string]bool{}
	for _, raw := range pods {
		ns, name := PodKey(raw)
		replaced[ns+"/"+name] = true
	}
	return h.updateAll(devices, func(current []json.RawMessage) []json.RawMessage {
		keep := current[:0:0]
		for _, raw := range current {
			ns, name := PodKey(raw)
			if !replaced[ns+"/"+name] {
				keep = append(keep, raw)
			}
		}
		return append(keep, pods...)
	})
}

// AnnotationScheduled marks the pods of a device's desired document that
// the scheduler placed, apart from those applied to the device by hand
// (apply --device/--selector), which it leaves alone.
const AnnotationScheduled = fleetdb.AnnotationScheduled

// checkApplied checks applied pods as a device will (the check depends
// on the pods only, not on the device).
func checkApplied(pods []json.RawMessage) error {
	check := protocol.Desired{Device: "check", Generation: 1, Pods: pods}
	decoded, results := protocol.DecodePods(&check, manifest.Decode)
	var reasons []string
	for _, r := range results {
		if !r.Accepted {
			reasons = append(reasons, r.Reason)
		}
	}
	for _, p := range decoded {
		// The scheduler takes the pods marked as its own off the device
		// when it pushes the ones it placed.
		if _, marked := p.Annotations[AnnotationScheduled]; marked {
			reasons = append(reasons, fmt.Sprintf("pod %q: metadata.annotations[%s]: Forbidden: marks the pods the hub's scheduler places; the next pass would take this one off the device",
				p.Name, AnnotationScheduled))
		}
	}
	if len(reasons) > 0 {
		return fmt.Errorf("refused: %v", reasons)
	}
	return nil
}

// Delete removes a pod from a device's desired state.
func (h *Link) Delete(device, namespace, name string) (int64, error) {
	if cur, err := h.fleet.Desired(device); err != nil || cur.Generation == 0 {
		if err == nil {
			err = fmt.Errorf("device %q has no hub pods: %w", device, fleetdb.ErrNotFound)
		}
		return 0, err
	}
	found := false
	gen, err := h.Update(device, func(current []json.RawMessage) []json.RawMessage {
		keep := current[:0:0]
		for _, raw := range current {
			ns, n := PodKey(raw)
			if ns == namespace && n == name {
				found = true
				continue
			}
			keep = append(keep, raw)
		}
		return keep
	})
	if err == nil && !found {
		return gen, fmt.Errorf("device %s has no hub pod %s/%s", device, namespace, name)
	}
	return gen, err
}

// Fence fences a device (podhub fence device): marked in the fleet, then
// its next desired document, stored and published, names every pod it
// had in a fence and gives it none. The scheduler's next pass deletes
// its hub pods and places them elsewhere.
func (h *Link) Fence(device string) (int64, error) {
	if err := h.fleet.SetFenced(device, h.now()); err != nil {
		return 0, err
	}
	return h.Update(device, func(current []json.RawMessage) []json.RawMessage { return current })
}

// Unfence lifts a device's fence once it is safe (fleetdb.Unfence) and
// publishes a document without it.
func (h *Link) Unfence(device string) (int64, error) {
	if err := h.fleet.Unfence(device); err != nil {
		return 0, err
	}
	return h.Update(device, func(current []json.RawMessage) []json.RawMessage { return current })
}

// Update makes a device's next desired document with change, stores it
// and publishes it.
func (h *Link) Update(device string, change func([]json.RawMessage) []json.RawMessage) (int64, error) {
	gens, err := h.updateAll([]string{device}, change)
	if len(gens) == 1 {
		return gens[0], err
	}
	return 0, err
}

// storeBatch bounds the documents stored in one transaction, so that the
// reports waiting for the database meanwhile wait for a batch, not for a
// whole fleet.
const storeBatch = 256

// updateAll makes each device's next generation with change, signs it,
// and stores a batch of documents in one transaction before publishing
// them; it stops at the first device whose document cannot be made.
func (h *Link) updateAll(devices []string, change func([]json.RawMessage) []json.RawMessage) (gens []int64, err error) {
	h.updating.Lock()
	defer h.updating.Unlock()
	for len(devices) > 0 && err == nil {
		n := min(len(devices), storeBatch)
		var docs []fleetdb.DesiredDoc
		for _, device := range devices[:n] {
			var next fleetdb.DesiredDoc
			if next, err = h.nextDoc(device, change); err != nil {
				break
			}
			docs = append(docs, next)
		}
		devices = devices[n:]
		if len(docs) == 0 {
			break
		}
		if serr := h.fleet.SaveDesiredAll(docs); serr != nil {
			return gens, serr
		}
		// The devices' object indexes go before the documents: a device
		// knows the objects its new pods reference are on their way (it
		// waits for them, quietly) before the pods arrive.
		if h.cfg.Objects != nil {
			next := make(map[string][]json.RawMessage, len(docs))
			for _, d := range docs {
				next[d.Device] = d.Pods
			}
			h.cfg.Objects.PrepareDesired(next)
		}
		// Stored first: a hub that dies here publishes them at its next start.
		for _, d := range docs {
			h.client.Publish(h.topics.Device(d.Device, protocol.KindDesired), 1, true, d.Document)
			gens = append(gens, d.Generation)
			if h.cfg.Objects != nil {
				h.cfg.Objects.DesiredChanged(d.Device, d.Pods)
			}
		}
	}
	return gens, err
}

// nextDoc makes a device's next desired document, signed.
func (h *Link) nextDoc(device string, change func([]json.RawMessage) []json.RawMessage) (fleetdb.DesiredDoc, error) {
	if err := protocol.ValidDeviceID(device); err != nil {
		return fleetdb.DesiredDoc{}, err
	}
	cur, err := h.fleet.Desired(device)
	if err != nil {
		return fleetdb.DesiredDoc{}, err
	}
	fence, err := h.fleet.Fence(device)
	if err != nil && !errors.Is(err, fleetdb.ErrNotFound) {
		return fleetdb.DesiredDoc{}, err
	}
	next := fleetdb.DesiredDoc{Device: device, Generation: cur.Generation + 1, Pods: change(cur.Pods)}
	if next.Fence = fleetdb.NextFence(fence, slices.Concat(cur.Pods, next.Pods)); next.Fence != nil {
		// A fenced device runs nothing: every pod it had, or would have
		// been given, is named by the fence instead.
		next.Pods = []json.RawMessage{}
	}
	next.Document, err = protocol.Sign(protocol.Desired{Device: device, Generation: next.Generation, Pods: next.Pods, Fence: next.Fence}, h.cfg.Key)
	if err != nil {
		return fleetdb.DesiredDoc{}, err
	}
	if len(next.Document) > protocol.MaxDesiredBytes {
		return fleetdb.DesiredDoc{}, fmt.Errorf("device %s: the desired document would be %d bytes, over the %d byte limit", device, len(next.Document), protocol.MaxDesiredBytes)
	}
	return next, nil
}

// PodKey reads a stored pod's namespace and name (stored pods were
// validated; the namespace defaults to "default").
func PodKey(raw json.RawMessage) (string, string) {
	var meta struct {
		Metadata struct{ Namespace, Name string } `json:"metadata"`
	}
	json.Unmarshal(raw, &meta)
	if meta.Metadata.Namespace == "" {
		meta.Metadata.Namespace = "default"
	}
	return meta.Metadata.Namespace, meta.Metadata.Name
}
