package uplink

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/throttle"
)

// The hub's ConfigMaps and Secrets on the link: the device announces its
// sealing key (retained, at every connection), takes the hub's signed
// index, asks for the entries it lacks, and keeps each object's message
// as received in state.db, its data still sealed; the opened data lives
// only in memory. Handlers run on paho's reader, one message at a time.

// hubObjects is the agent's side of the hub's objects; as an
// objects.Getter it gives the hub pods theirs.
type hubObjects struct {
	// on: the device takes objects (a sealing key and a hub key).
	on bool
	// sealKeyMsg is the seal-key announcement (nil: no sealing key).
	sealKeyMsg []byte
	// write serialises the handlers' decide-then-store sequences with
	// the loading at start; mu guards set for the getter.
	write sync.Mutex
	mu    sync.RWMutex
	set   *objectSet
	// wake asks the request loop to ask for what is missing now.
	wake    chan struct{}
	refused *throttle.Counter

	// changed are the refs changed since the daemon was last told,
	// overdue those that stayed pending too long.
	chMu       sync.Mutex
	changed    map[objects.Ref]bool
	overdue    map[objects.Ref]bool
	changeWake chan struct{}
	now        func() time.Time
}

// Get is the hub's object ref as the device holds it. An entry of the
// index in force of which the device holds no usable version yet (asked
// for, on its way) is pending (*objects.PendingError) for up to
// ObjectPendingMax; an object the hub does not list for this device is
// not found.
func (h *hubObjects) Get(ref objects.Ref) (*objects.Object, error) {
	now := h.now()
	h.mu.RLock()
	defer h.mu.RUnlock()
	return h.set.get(ref, now)
}

// Objects is the getter of the hub's ConfigMaps and Secrets for hub pods.
// It holds the objects kept on the device from the start (opened from
// state.db in New), and keeps them while the hub is out of reach or
// revoked; Config.OnObjectsChanged tells of changes.
func (a *Agent) Objects() objects.Getter { return &a.objs }

func (a *Agent) initObjects() {
	h := &a.objs
	h.set = newObjectSet(a.cfg.MaxObjects, a.cfg.MaxObjectBytes)
	h.wake = make(chan struct{}, 1)
	h.changeWake = make(chan struct{}, 1)
	h.changed = map[objects.Ref]bool{}
	h.overdue = map[objects.Ref]bool{}
	h.now = func() time.Time { return a.now() }
	h.refused = throttle.New(5, time.Minute, nil)
	if a.cfg.SealKey == nil {
		return
	}
	msg, err := protocol.EncodeSealKey(a.cfg.DeviceID, a.cfg.SealKey.Public().Bytes())
	if err != nil {
		a.log.Error("the sealing key cannot be announced", "err", err)
	} else {
		h.sealKeyMsg = msg
	}
	if a.cfg.HubKey == nil {
		a.log.Warn("the hub's ConfigMaps and Secrets need the hub's key (hub.key) to check their signatures; hub pods get none")
		return
	}
	h.on = true
	a.loadObjects()
}

// loadObjects opens the index and the objects kept in state.db: hub pods
// have them from the start, with no hub in reach. What no longer opens
// (another hub key, another sealing key) is left for the next index to
// replace or drop.
func (a *Agent) loadObjects() {
	h := &a.objs
	h.write.Lock()
	defer h.write.Unlock()
	doc, ok, err := a.store.ObjectIndex()
	if err != nil || !ok {
		if err != nil {
			a.log.Error("the hub objects kept on this device are unreadable; they are asked for again", "err", err)
		}
		return
	}
	ix, err := protocol.OpenObjectIndex(doc, a.cfg.DeviceID, a.cfg.HubKey)
	if err != nil {
		a.log.Error("the stored object index does not open; the hub's objects are asked for again", "err", err)
		return
	}
	msgs, err := a.store.Objects()
	if err != nil {
		a.log.Error("the hub objects kept on this device are unreadable; they are asked for again", "err", err)
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	v, err := h.set.setIndex(ix, a.now())
	if err != nil {
		a.log.Error("the stored object index", "err", err)
		return
	}
	if v.over != nil {
		a.log.Error("hub object index over the bound", "err", v.over)
	}
	// In index order, as they came: the bound on bytes keeps the same.
	n := 0
	for _, want := range ix.Entries {
		k := want.Key()
		msg, ok := msgs[k]
		if !ok {
			continue
		}
		e, obj, err := a.openObject(msg)
		if err == nil && e.Key() != k {
			err = errStoredKey
		}
		if err == nil {
			_, err = h.set.accept(e, obj)
		}
		if err != nil {
			a.log.Error("a hub object kept on this device is not used; it is asked for again", "key", k, "err", err)
			continue
		}
		n++
	}
	a.log.Info("hub objects kept on this device", "generation", ix.Generation, "objects", n, "index", len(ix.Entries))
}

var errStoredKey = errors.New("stored under another key than the object it holds")

// openObject checks an object message (the hub's signature, this device,
// the sealed data's hash), opens its data with the sealing key, bound to
// the entry the header names, and decodes it. Errors never carry data.
func (a *Agent) openObject(msg []byte) (protocol.ObjectEntry, *objects.Object, error) {
	hd, sealed, err := protocol.OpenObject(msg, a.cfg.DeviceID, a.cfg.HubKey)
	if err != nil {
		return protocol.ObjectEntry{}, nil, err
	}
	plain, err := a.cfg.SealKey.Open(protocol.SealInfo(a.cfg.DeviceID, hd.Entry), sealed)
	if err != nil {
		return hd.Entry, nil, fmt.Errorf("%s %s: %w", hd.Entry.Kind, hd.Entry.Namespace+"/"+hd.Entry.Name, err)
	}
	data, err := protocol.DecodeData(plain)
	clear(plain)
	if err != nil {
		return hd.Entry, nil, fmt.Errorf("%s %s: %w", hd.Entry.Kind, hd.Entry.Namespace+"/"+hd.Entry.Name, err)
	}
	obj, err := objectOf(hd.Entry, hd.Type, data)
	return hd.Entry, obj, err
}

// onObjectIndex takes the hub's index: a newer generation replaces the
// one in force; the objects it no longer lists are dropped, from memory
// and state.db; the entries missing are asked for.
func (a *Agent) onObjectIndex(_ mqtt.Client, m mqtt.Message) {
	payload := m.Payload()
	if len(payload) == 0 {
		return // a cleared retained index
	}
	h := &a.objs
	ix, err := protocol.OpenObjectIndex(payload, a.cfg.DeviceID, a.cfg.HubKey)
	if err != nil {
		a.refuseObject(m.Topic(), "refused an object index", err)
		return
	}
	h.write.Lock()
	defer h.write.Unlock()
	h.mu.Lock()
	v, err := h.set.setIndex(ix, a.now())
	h.mu.Unlock()
	if err != nil {
		a.refuseObject(m.Topic(), "refused an object index", err)
		return
	}
	if v.over != nil {
		a.log.Error("hub object index over the bound", "err", v.over)
	}
	// Stored at every index, the same one again too: a row the device
	// could not open (so not in memory) is dropped from disk with its
	// entry all the same.
	dropped, err := a.store.SetObjectIndex(ix.Generation, payload, func(k string) bool { return v.keep[k] })
	if err != nil {
		a.log.Error("storing the hub's object index", "generation", ix.Generation, "err", err)
	}
	if len(dropped) > 0 || len(v.drop) > 0 {
		a.log.Info("hub objects dropped", "generation", ix.Generation, "objects", max(len(dropped), len(v.drop)))
	}
	a.objectsChanged(v.changed...)
	poke(h.wake)
}

// onObject takes one object: it must open with this device's keys and be
// an entry of the index in force; it is kept as received.
func (a *Agent) onObject(_ mqtt.Client, m mqtt.Message) {
	payload := m.Payload()
	e, obj, err := a.openObject(payload)
	if err != nil {
		a.refuseObject(m.Topic(), "refused a hub object", err)
		return
	}
	h := &a.objs
	h.write.Lock()
	defer h.write.Unlock()
	h.mu.Lock()
	changed, err := h.set.accept(e, obj)
	h.mu.Unlock()
	if errors.As(err, new(boundError)) {
		a.log.Error("hub object over the bound", "err", err)
		return
	}
	if err != nil {
		a.refuseObject(m.Topic(), "refused a hub object", err)
		return
	}
	if !changed {
		return
	}
	if err := a.store.SaveObject(e.Key(), payload); err != nil {
		// Kept in memory; after a restart it is asked for again.
		a.log.Error("storing a hub object", "object", obj.Ref.String(), "err", err)
	}
	a.log.Info("hub object", "object", obj.Ref.String(), "resourceVersion", e.ResourceVersion, "keys", len(obj.Data))
	a.objectsChanged(obj.Ref)
}

// refuseObject logs the first few refusals of each minute, then how many
// more.
func (a *Agent) refuseObject(topic, what string, err error) {
	log, suppressed := a.objs.refused.Note()
	if suppressed > 0 {
		a.log.Warn("refused more hub objects", "topic", topic, "count", suppressed, "total", a.objs.refused.Total())
	}
	if log {
		a.log.Warn(what, "topic", topic, "err", err)
	}
}

// objectRequests asks the hub for the index entries missing: at once on
// a new index or connection, then again with a backoff while they stay
// missing. Requests go only on a connection that is up: the next one asks
// again. Connected or not, it tells of the entries pending too long.
func (a *Agent) objectRequests(stop <-chan struct{}) {
	h := &a.objs
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	poke(h.wake) // the entries loaded from state.db are pending from the start
	for {
		event := false
		select {
		case <-stop:
			return
		case <-h.wake:
			event = true
		case <-timer.C:
		}
		now := a.now()
		h.mu.Lock()
		overdue, expiry := h.set.overdueAt(now)
		h.mu.Unlock()
		if len(overdue) > 0 {
			a.log.Warn("hub objects not received in time; pods go on without them", "objects", len(overdue),
				"first", overdue[0].String(), "waited", ObjectPendingMax)
			a.objectsOverdue(overdue)
		}
		up, _, _, c := a.linkClient()
		if !up {
			timer.Stop()
			if !expiry.IsZero() {
				timer.Reset(max(expiry.Sub(now), 0))
			}
			continue
		}
		h.mu.Lock()
		batches, next := h.set.poll(now, event)
		h.mu.Unlock()
		for _, b := range batches {
			msg, err := protocol.EncodeObjectGet(b)
			if err != nil {
				a.log.Error("asking the hub for objects", "err", err)
				continue
			}
			c.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindObjectGet), 1, false, msg)
		}
		if len(batches) > 0 {
			n := 0
			for _, b := range batches {
				n += len(b)
			}
			a.log.Debug("asked the hub for objects", "objects", n)
		}
		if next.IsZero() || !expiry.IsZero() && expiry.Before(next) {
			next = expiry
		}
		timer.Stop()
		if !next.IsZero() {
			timer.Reset(max(next.Sub(now), 0))
		}
	}
}

// objectsOverdue notes overdue refs for the daemon: told as overdue,
// then as changed.
func (a *Agent) objectsOverdue(refs []objects.Ref) {
	h := &a.objs
	h.chMu.Lock()
	for _, r := range refs {
		h.overdue[r] = true
	}
	h.chMu.Unlock()
	a.objectsChanged(refs...)
}

// objectsChanged notes changed refs for the daemon.
func (a *Agent) objectsChanged(refs ...objects.Ref) {
	if len(refs) == 0 || a.cfg.OnObjectsChanged == nil {
		return
	}
	h := &a.objs
	h.chMu.Lock()
	for _, r := range refs {
		h.changed[r] = true
	}
	h.chMu.Unlock()
	poke(h.changeWake)
}

// handChanges tells the daemon which objects changed, off paho's reader,
// one call at a time, changes that came meanwhile together.
func (a *Agent) handChanges(stop <-chan struct{}) {
	h := &a.objs
	for {
		select {
		case <-stop:
			return
		case <-h.changeWake:
		}
		h.chMu.Lock()
		refs, overdue := sortedRefs(h.changed), sortedRefs(h.overdue)
		h.changed, h.overdue = map[objects.Ref]bool{}, map[objects.Ref]bool{}
		h.chMu.Unlock()
		if len(overdue) > 0 && a.cfg.OnObjectsOverdue != nil {
			a.cfg.OnObjectsOverdue(overdue)
		}
		if len(refs) == 0 {
			continue
		}
		a.cfg.OnObjectsChanged(refs)
	}
}

func sortedRefs(set map[objects.Ref]bool) []objects.Ref {
	refs := make([]objects.Ref, 0, len(set))
	for r := range set {
		refs = append(refs, r)
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}

// announceSealKey publishes the sealing key, retained, on a new
// connection: the hub seals for it.
func (a *Agent) announceSealKey(c mqtt.Client) {
	if a.objs.sealKeyMsg != nil {
		c.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindSealKey), 1, true, a.objs.sealKeyMsg)
	}
}
