package simfleet

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/seal"
)

// ObjectConfig is how a simulated device takes the hub's ConfigMaps and
// Secrets.
type ObjectConfig struct {
	// Heartbeat is the period of its heartbeats (default 2 s).
	Heartbeat time.Duration
	// Retry is how soon entries still missing are asked for again,
	// doubling up to RetryMax while they stay missing (default 10 s and
	// 5 min: a real device's, sync/uplink).
	Retry, RetryMax time.Duration
	// Opened is called with every object the device opened (the hub's
	// signature, this device, the sealed data's hash, the sealing, all
	// checked), on the device's MQTT reader.
	Opened func(id string, e protocol.ObjectEntry, data map[string][]byte)
	Log    *slog.Logger
}

// ObjectDevice is a simulated device that takes the hub's objects as a
// real one does, apart from running pods: it announces a sealing key of
// its own (a real HPKE key), opens the hub's signed index, asks for the
// entries whose UID and resourceVersion it does not hold, and opens each
// object with its key. It counts the bytes of every object message it
// receives, per topic and per object, so that what the hub sends a
// device is measured where it arrives.
//
// It is its own MQTT client (one client ID per device): it heartbeats
// and says its presence itself, and takes no desired documents (the
// hub's index follows the pods applied to it, not the device's ack).
type ObjectDevice struct {
	ID  string
	cfg ObjectConfig
	d   Device
	key *seal.PrivateKey
	top protocol.Topics
	c   mqtt.Client

	mu    sync.Mutex
	index *protocol.ObjectIndex
	have  map[string]protocol.ObjectEntry // by key: the version held
	// next is when the entries still missing are asked for again, after
	// backoff (zero: nothing missing).
	next    time.Time
	backoff time.Duration
	byObj   map[string]int64 // by key: object message bytes received
	stop    chan struct{}
	done    sync.WaitGroup
	closed  bool

	// IndexBytes and ObjectBytes are the payload bytes received on the
	// objects and object topics; Indexes and Objects the messages.
	IndexBytes, ObjectBytes atomic.Int64
	Indexes, Objects        atomic.Int64
	// Requests counts the object-get messages sent; Refused the messages
	// received that did not open.
	Requests, Refused atomic.Int64
}

// ObjectDevice makes a simulated device with d's credentials and a new
// sealing key.
func (d Device) ObjectDevice(cfg ObjectConfig) (*ObjectDevice, error) {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 2 * time.Second
	}
	if cfg.Retry <= 0 {
		cfg.Retry = 10 * time.Second
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 5 * time.Minute
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	key, err := seal.GenerateKey()
	if err != nil {
		return nil, err
	}
	return &ObjectDevice{ID: d.ID, cfg: cfg, d: d, key: key, have: map[string]protocol.ObjectEntry{},
		byObj: map[string]int64{}, stop: make(chan struct{})}, nil
}

// Start connects, announces the sealing key and starts heartbeating.
func (o *ObjectDevice) Start() error {
	keyMsg, err := protocol.EncodeSealKey(o.ID, o.key.Public().Bytes())
	if err != nil {
		return err
	}
	presence := func(online bool) []byte {
		return protocol.Encode(&protocol.Presence{Device: o.ID, Online: online})
	}
	opts := mqtt.NewClientOptions().AddBroker(o.d.e.broker).SetClientID(o.ID).SetTLSConfig(o.d.tc).
		SetCleanSession(true).SetAutoReconnect(true).SetConnectRetry(true).SetConnectRetryInterval(time.Second).
		SetBinaryWill(o.top.Device(o.ID, protocol.KindPresence), presence(false), 1, true).
		SetOnConnectHandler(func(c mqtt.Client) {
			c.Subscribe(o.top.Device(o.ID, protocol.KindObjects), 1, o.onIndex)
			c.Subscribe(o.top.Device(o.ID, protocol.KindObject), 1, o.onObject)
			c.Publish(o.top.Device(o.ID, protocol.KindSealKey), 1, true, keyMsg)
			c.Publish(o.top.Device(o.ID, protocol.KindPresence), 1, true, presence(true))
			o.heartbeat()
		})
	o.c = mqtt.NewClient(opts)
	if tok := o.c.Connect(); !tok.WaitTimeout(30*time.Second) || tok.Error() != nil {
		return fmt.Errorf("sim %s: connecting: %v", o.ID, tok.Error())
	}
	o.done.Add(1)
	go o.loop()
	return nil
}

// Stop says goodbye (offline) and disconnects.
func (o *ObjectDevice) Stop() {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	o.mu.Unlock()
	close(o.stop)
	o.done.Wait()
	o.c.Publish(o.top.Device(o.ID, protocol.KindPresence), 1, true,
		protocol.Encode(&protocol.Presence{Device: o.ID, Online: false})).WaitTimeout(2 * time.Second)
	o.c.Disconnect(200)
}

// ObjectBytesOf is the object message bytes received for one object
// (kind/namespace/name) so far.
func (o *ObjectDevice) ObjectBytesOf(key string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.byObj[key]
}

// Holds is the version the device holds of an object ("" none).
func (o *ObjectDevice) Holds(key string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.have[key].ResourceVersion
}

// loop heartbeats and asks again for what is still missing.
func (o *ObjectDevice) loop() {
	defer o.done.Done()
	beat := time.NewTicker(o.cfg.Heartbeat)
	defer beat.Stop()
	retry := time.NewTicker(time.Second)
	defer retry.Stop()
	for {
		select {
		case <-o.stop:
			return
		case <-beat.C:
			o.heartbeat()
		case <-retry.C:
			o.ask(false)
		}
	}
}

func (o *ObjectDevice) heartbeat() {
	hb := &protocol.Heartbeat{Device: o.ID, Time: time.Now(), Version: "v1.0.0", Node: RoomyNode().Status}
	o.c.Publish(o.top.Device(o.ID, protocol.KindHeartbeat), 1, false, protocol.Encode(hb))
}

// onIndex takes a newer index and asks for what it lacks.
func (o *ObjectDevice) onIndex(_ mqtt.Client, m mqtt.Message) {
	p := m.Payload()
	if len(p) == 0 {
		return
	}
	o.IndexBytes.Add(int64(len(p)))
	o.Indexes.Add(1)
	ix, err := protocol.OpenObjectIndex(p, o.ID, o.d.e.hubKey)
	if err != nil {
		o.Refused.Add(1)
		o.cfg.Log.Warn("refused an object index", "device", o.ID, "err", err)
		return
	}
	o.mu.Lock()
	if o.index != nil && ix.Generation <= o.index.Generation {
		o.mu.Unlock()
		return
	}
	o.index = ix
	keep := map[string]bool{}
	for _, e := range ix.Entries {
		keep[e.Key()] = true
	}
	for k := range o.have {
		if !keep[k] {
			delete(o.have, k)
		}
	}
	o.mu.Unlock()
	o.ask(true)
}

// ask requests the index entries not held: at once on a new index
// (event), else once the backoff has passed, the backoff doubling, as a
// real device asks (sync/uplink's objectSet.poll).
func (o *ObjectDevice) ask(event bool) {
	now := time.Now()
	o.mu.Lock()
	var missing []protocol.ObjectEntry
	if o.index != nil {
		for _, e := range o.index.Entries {
			if h, ok := o.have[e.Key()]; ok && (h.Same(e) || (e.Immutable && h.UID == e.UID)) {
				continue
			}
			missing = append(missing, e)
		}
	}
	switch {
	case len(missing) == 0:
		o.next, o.backoff = time.Time{}, 0
	case event || o.backoff == 0:
		o.backoff = o.cfg.Retry
	case now.Before(o.next):
		missing = nil
	default:
		o.backoff = min(2*o.backoff, o.cfg.RetryMax)
	}
	if len(missing) > 0 {
		o.next = now.Add(o.backoff)
	}
	o.mu.Unlock()
	for len(missing) > 0 {
		n := min(len(missing), protocol.MaxObjectGetRefs)
		msg, err := protocol.EncodeObjectGet(missing[:n])
		if err != nil {
			o.cfg.Log.Error("asking for objects", "device", o.ID, "err", err)
			return
		}
		o.c.Publish(o.top.Device(o.ID, protocol.KindObjectGet), 1, false, msg)
		o.Requests.Add(1)
		missing = missing[n:]
	}
}

// onObject opens one object: it must be of this device, signed by the
// hub, the current version of an index entry, and open with the
// device's sealing key.
func (o *ObjectDevice) onObject(_ mqtt.Client, m mqtt.Message) {
	p := m.Payload()
	o.ObjectBytes.Add(int64(len(p)))
	o.Objects.Add(1)
	h, sealed, err := protocol.OpenObject(p, o.ID, o.d.e.hubKey)
	if err == nil {
		o.mu.Lock()
		o.byObj[h.Entry.Key()] += int64(len(p))
		o.mu.Unlock()
	}
	var data map[string][]byte
	if err == nil {
		var plain []byte
		if plain, err = o.key.Open(protocol.SealInfo(o.ID, h.Entry), sealed); err == nil {
			data, err = protocol.DecodeData(plain)
		}
	}
	if err != nil {
		o.Refused.Add(1)
		o.cfg.Log.Warn("refused an object", "device", o.ID, "err", err)
		return
	}
	o.mu.Lock()
	listed := false
	if o.index != nil {
		for _, e := range o.index.Entries {
			listed = listed || e.Same(h.Entry)
		}
	}
	if listed {
		o.have[h.Entry.Key()] = h.Entry
	}
	o.mu.Unlock()
	if listed && o.cfg.Opened != nil {
		o.cfg.Opened(o.ID, h.Entry, data)
	}
}
