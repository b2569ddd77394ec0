package objectlink

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/hub/chunks"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/throttle"
)

// Config is what the object link serves, signs with and bounds.
type Config struct {
	Topics protocol.Topics
	// Key signs the indexes and objects (the hub's key, as the desired
	// documents).
	Key ed25519.PrivateKey
	// Source is the hub's ConfigMaps and Secrets, their data in clear
	// (nil: none; every index is empty).
	Source objects.Getter
	// Limits bound each device (zero fields: DefaultLimits').
	Limits Limits
	// Rate is each device's request budget, bytes of object data a
	// second (default 1 MiB); a device may spend Limits.MaxBytes at once,
	// so that a device starting empty gets all its objects at once.
	Rate float64
	// Retry is how soon an index whose objects could not be read is
	// computed again (default 1 s).
	Retry time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Publisher publishes on the broker without waiting (QoS 1).
type Publisher func(topic string, retained bool, payload []byte)

// Link keeps the devices' indexes and answers their requests. Changes
// (a device's pods, an object) mark the devices they concern; one
// goroutine computes and publishes their indexes, another answers
// requests, so neither holds up the device link's reports.
type Link struct {
	cfg     Config
	fleet   *fleetdb.Fleet
	publish Publisher
	log     *slog.Logger

	mu      sync.Mutex
	devices map[string]*device
	// users are, per object, the devices whose pods reference it.
	users   map[objects.Ref]map[string]bool
	revoked map[string]bool
	dirty   map[string]bool
	// reload asks the indexer to read the fleet's state again first
	// (Reload, or an index another replica stored meanwhile).
	reload bool
	// reloadDevs are devices whose pods and index another replica
	// stored (ReloadDevice).
	reloadDevs map[string]bool
	wake       chan struct{}

	// pubMu orders storing and publishing an index against publishing
	// every stored one at a connection; passMu runs one pass at a time
	// (the indexer's, or PrepareDesired's), so two never make the same
	// generation.
	pubMu  sync.Mutex
	passMu sync.Mutex

	requests *requestQueue
	done     chan struct{}
	wg       sync.WaitGroup
	started  bool
	// refused counts refused requests and keys: the first few of each
	// minute are logged and kept as the device's events.
	refused *throttle.Counter
	// denied counts the refs asked for that were not in the asking
	// device's index.
	denied atomic.Int64
	// owns says which devices this replica handles (SetOwner; nil: all):
	// a connection publishes only their indexes.
	owns func(device string) bool
}

// SetOwner makes the link one replica's of several on one broker: a
// connection publishes again only the indexes of the devices owns says
// this replica handles. Call before Start.
func (l *Link) SetOwner(owns func(device string) bool) { l.owns = owns }

// Gained is told of devices this replica now handles (in says which):
// their pods and indexes are read again (another replica may have
// stored them, its signal lost).
func (l *Link) Gained(in func(device string) bool) {
	l.mu.Lock()
	for dev := range l.devices {
		if in(dev) {
			l.reloadDevs[dev] = true
		}
	}
	l.mu.Unlock()
	l.kick()
}

// device is what the link keeps of one device.
// It keeps what its pods reference, not the pods (a hub keeps little
// per idle device).
type device struct {
	refs       []objects.Ref
	entries    []protocol.ObjectEntry
	omitted    []string
	generation int64
	budget     *chunks.Bucket
}

// New makes a link; Start loads the fleet's state and starts it.
func New(cfg Config, fleet *fleetdb.Fleet, publish Publisher, log *slog.Logger) *Link {
	if cfg.Limits.MaxObjects <= 0 {
		cfg.Limits.MaxObjects = DefaultLimits.MaxObjects
	}
	if cfg.Limits.MaxBytes <= 0 {
		cfg.Limits.MaxBytes = DefaultLimits.MaxBytes
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 1 << 20
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Link{cfg: cfg, fleet: fleet, publish: publish, log: log, devices: map[string]*device{},
		users: map[objects.Ref]map[string]bool{}, revoked: map[string]bool{}, dirty: map[string]bool{}, reloadDevs: map[string]bool{},
		wake: make(chan struct{}, 1), requests: newRequestQueue(), done: make(chan struct{}),
		refused: throttle.New(10, time.Minute, cfg.Now)}
}

// Start reads every device's pods and last index, and starts
// computing (every device once: objects may have changed while the hub
// was down) and answering.
func (l *Link) Start() error {
	if err := l.load(); err != nil {
		return err
	}
	l.mu.Lock()
	l.started = true
	l.mu.Unlock()
	l.kick()
	l.wg.Add(2)
	go l.indexer()
	go l.answerer()
	return nil
}

// load reads every device's pods, last index and revocation from the
// fleet, and marks every device. A device known here with no pods
// stored any more references nothing.
func (l *Link) load() error {
	stored, err := l.fleet.ObjectIndexes()
	if err != nil {
		return err
	}
	revoked, err := l.fleet.Revoked()
	if err != nil {
		return err
	}
	var pods = map[string][]byte{}
	if err := l.fleet.EachDesiredPods(func(dev string, raw []byte) { pods[dev] = raw }); err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.revoked = revoked
	for dev, st := range stored {
		d := l.device(dev)
		d.generation, d.entries, d.omitted = st.Generation, st.Entries, st.Omitted
		l.dirty[dev] = true
	}
	for dev := range l.devices {
		if _, ok := pods[dev]; !ok {
			l.setPods(dev, nil)
		}
	}
	for dev, raw := range pods {
		var list []json.RawMessage
		json.Unmarshal(raw, &list)
		l.setPods(dev, list)
	}
	return nil
}

// ReloadDevice reads a device's pods and stored index again, in the
// indexer's goroutine (it does not block): another replica stored its
// desired document or its index (and computed that index: this one is
// not computed again).
func (l *Link) ReloadDevice(dev string) {
	l.mu.Lock()
	l.reloadDevs[dev] = true
	l.mu.Unlock()
	l.kick()
}

// loadDevice is ReloadDevice's read.
func (l *Link) loadDevice(dev string) error {
	raw, err := l.fleet.DesiredPods(dev)
	if err != nil {
		return err
	}
	st, err := l.fleet.DeviceObjects(dev)
	if err != nil {
		return err
	}
	var list []json.RawMessage
	json.Unmarshal(raw, &list)
	refs := PodRefs(decodePods(list))
	l.mu.Lock()
	defer l.mu.Unlock()
	d := l.devices[dev]
	if d == nil && len(refs) == 0 && st.Generation == 0 {
		return nil
	}
	if d == nil {
		d = l.device(dev)
	}
	l.setRefs(dev, d.refs, refs)
	d.generation, d.entries, d.omitted = st.Generation, st.Entries, st.Omitted
	if st.RevokedAt.IsZero() {
		delete(l.revoked, dev)
	} else {
		l.revoked[dev] = true
	}
	return nil
}

// Reload reads every device's pods and stored index again and computes
// every index, in the indexer's goroutine (it does not block; requests
// coalesce): what other replicas stored since (the desired documents
// their passes or applies wrote, their indexes, their objects) is known
// before the next index is made.
func (l *Link) Reload() {
	l.mu.Lock()
	l.reload = true
	l.mu.Unlock()
	l.kick()
}

// Close stops the link.
func (l *Link) Close() {
	l.mu.Lock()
	started := l.started
	l.started = false
	l.mu.Unlock()
	if !started {
		return
	}
	close(l.done)
	l.wg.Wait()
}

// device is a device's state, made on first use; l.mu held.
func (l *Link) device(id string) *device {
	d := l.devices[id]
	if d == nil {
		d = &device{}
		l.devices[id] = d
	}
	return d
}

// DesiredChanged takes a device's new desired pods (hub pods and
// workload pods, as its desired document carries them).
func (l *Link) DesiredChanged(dev string, pods []json.RawMessage) {
	l.mu.Lock()
	l.setPods(dev, pods)
	l.mu.Unlock()
	l.kick()
}

// PrepareDesired is told of devices' next desired pods after they are
// stored and before their documents are published. Each device whose
// next pods reference objects its index lacks gets its index computed,
// stored and published now, before this returns, listing what its
// current and its next pods reference: by the time the pods reach the
// device, it knows their objects are on their way (pending, not
// missing), and has asked for them. What only the current pods used
// leaves at DesiredChanged, after the document: a pod being removed
// keeps its objects until it is gone. An index that cannot be made now
// is logged and left to the indexer (the device then meets the pods
// first, and their objects as not found until the index comes, as the
// kubelet would).
func (l *Link) PrepareDesired(next map[string][]json.RawMessage) {
	l.mu.Lock()
	if !l.started {
		l.mu.Unlock()
		return
	}
	dirty := map[string]bool{}
	for dev, raw := range next {
		refs := PodRefs(decodePods(raw))
		var cur []objects.Ref
		if d := l.devices[dev]; d != nil {
			cur = d.refs
		}
		all, grew := union(refs, cur)
		if !grew {
			continue
		}
		l.device(dev)
		l.setRefs(dev, cur, all)
		dirty[dev] = true
	}
	l.mu.Unlock()
	if len(dirty) == 0 {
		return
	}
	l.passMu.Lock()
	failed := l.pass(dirty)
	l.passMu.Unlock()
	if failed {
		l.kick() // marked again: the indexer tries, then retries
	}
}

// union is next's refs, then those of cur that next lacks; grew says
// whether next has any cur lacks.
func union(next, cur []objects.Ref) (all []objects.Ref, grew bool) {
	in := make(map[objects.Ref]bool, len(cur))
	for _, r := range cur {
		in[r] = true
	}
	seen := make(map[objects.Ref]bool, len(next))
	for _, r := range next {
		seen[r] = true
		grew = grew || !in[r]
	}
	all = append([]objects.Ref(nil), next...)
	for _, r := range cur {
		if !seen[r] {
			all = append(all, r)
		}
	}
	return all, grew
}

// decodePods decodes a device's stored pods (validated when applied).
func decodePods(raw []json.RawMessage) []*v1.Pod {
	pods := make([]*v1.Pod, 0, len(raw))
	for _, r := range raw {
		var p v1.Pod
		if err := json.Unmarshal(r, &p); err != nil {
			continue
		}
		if p.Namespace == "" {
			p.Namespace = "default"
		}
		pods = append(pods, &p)
	}
	return pods
}

// setPods takes what a device's stored pods (validated when applied)
// reference, and marks it; l.mu held. A device whose pods reference
// nothing and that had no index is not kept.
func (l *Link) setPods(dev string, raw []json.RawMessage) {
	refs := PodRefs(decodePods(raw))
	d := l.devices[dev]
	if d == nil && len(refs) == 0 {
		return
	}
	if d == nil {
		d = l.device(dev)
	}
	l.setRefs(dev, d.refs, refs)
	l.dirty[dev] = true
}

// ObjectChanged says an object was applied or deleted: the devices whose
// pods reference it get their index computed again.
func (l *Link) ObjectChanged(ref objects.Ref) { l.ObjectsChanged([]objects.Ref{ref}) }

// ObjectsChanged is ObjectChanged for each of refs (the object store's
// OnChange). It does not block.
func (l *Link) ObjectsChanged(refs []objects.Ref) {
	l.mu.Lock()
	for _, ref := range refs {
		for dev := range l.users[ref] {
			l.dirty[dev] = true
		}
	}
	l.mu.Unlock()
	l.kick()
}

// Refresh reads the revoked devices again (podhub device revoke) and
// computes every index: a revoked device's becomes empty.
func (l *Link) Refresh() error {
	revoked, err := l.fleet.Revoked()
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.revoked = revoked
	for dev := range l.devices {
		l.dirty[dev] = true
	}
	l.mu.Unlock()
	l.kick()
	return nil
}

func (l *Link) kick() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Connected publishes every stored index again (a broker that lost its
// retained messages gets them back; devices ignore a generation they
// have).
func (l *Link) Connected() {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	stored, err := l.fleet.ObjectIndexes()
	if err != nil {
		l.log.Error("reading the object indexes", "err", err)
		return
	}
	for dev, st := range stored {
		if len(st.Document) > 0 && (l.owns == nil || l.owns(dev)) {
			l.publish(l.cfg.Topics.Device(dev, protocol.KindObjects), true, st.Document)
		}
	}
}

// indexer computes and publishes the marked devices' indexes.
func (l *Link) indexer() {
	defer l.wg.Done()
	var retry <-chan time.Time
	for {
		select {
		case <-l.done:
			return
		case <-l.wake:
		case <-retry:
			retry = nil
		}
		l.passMu.Lock()
		l.mu.Lock()
		reload, devs := l.reload, l.reloadDevs
		l.reload, l.reloadDevs = false, map[string]bool{}
		l.mu.Unlock()
		failed := false
		if reload {
			devs = nil // all of them
			if err := l.load(); err != nil {
				l.log.Error("reading the devices' pods and object indexes again; trying again", "err", err)
				l.mu.Lock()
				l.reload = true
				l.mu.Unlock()
				failed = true
			}
		}
		for dev := range devs {
			if err := l.loadDevice(dev); err != nil {
				l.log.Error("reading a device's pods and object index again; trying again", "device", dev, "err", err)
				l.mu.Lock()
				l.reloadDevs[dev] = true
				l.mu.Unlock()
				failed = true
			}
		}
		l.mu.Lock()
		dirty := l.dirty
		l.dirty = map[string]bool{}
		l.mu.Unlock()
		failed = l.pass(dirty) || failed
		l.passMu.Unlock()
		if failed && retry == nil {
			retry = time.After(l.cfg.Retry)
		}
	}
}

// errRead is an object the source could not read (not a missing one):
// the index is not computed from a guess.
var errRead = errors.New("reading an object")

// read is an object read from the source, or why not.
type read struct {
	obj *objects.Object
	err error
}

// storeBatch bounds the indexes stored in one transaction.
const storeBatch = 256

// pass computes the marked devices' indexes and stores and publishes the
// changed ones, a batch per transaction. It says whether any failed
// (they are marked again).
func (l *Link) pass(dirty map[string]bool) (failed bool) {
	retry := func(devs []string, err error) {
		moved := errors.Is(err, fleetdb.ErrIndexMoved)
		if moved {
			// Another replica stored one of these indexes since: what is
			// known here of them is read again first, at once.
			l.log.Info("another replica stored an object index meanwhile; reading it and computing again", "devices", len(devs), "first", devs[0])
		} else {
			l.log.Error("computing or storing object indexes; trying again", "devices", len(devs), "first", devs[0], "err", err)
		}
		l.mu.Lock()
		for _, dev := range devs {
			l.dirty[dev] = true
			if moved {
				l.reloadDevs[dev] = true
			}
		}
		l.mu.Unlock()
		if moved {
			l.kick()
		} else {
			failed = true
		}
	}
	// One read of each object per pass, however many devices use it.
	reads := map[objects.Ref]read{}
	var batch []fleetdb.ObjectIndexDoc
	flush := func() {
		if len(batch) == 0 {
			return
		}
		if err := l.commit(batch); err != nil {
			devs := make([]string, len(batch))
			for i, d := range batch {
				devs[i] = d.Device
			}
			retry(devs, err)
		}
		batch = batch[:0]
	}
	for dev := range dirty {
		next, err := l.next(dev, reads)
		if err != nil {
			retry([]string{dev}, err)
			continue
		}
		if next != nil {
			batch = append(batch, *next)
			if len(batch) == storeBatch {
				flush()
			}
		}
	}
	flush()
	return failed
}

// next computes a device's index: the next generation, signed, when its
// entries changed; nil when they did not (what the bounds left out is
// stored if only that changed).
func (l *Link) next(dev string, reads map[objects.Ref]read) (*fleetdb.ObjectIndexDoc, error) {
	l.mu.Lock()
	d := l.device(dev)
	refs := d.refs
	if l.revoked[dev] {
		refs = nil
	}
	prevEntries, prevOmitted, gen := d.entries, d.omitted, d.generation
	l.mu.Unlock()

	var readErr error
	ix := Compute(refs, func(r objects.Ref) *objects.Object {
		rd, ok := reads[r]
		if !ok {
			rd.obj, rd.err = l.get(r)
			reads[r] = rd
		}
		o, err := rd.obj, rd.err
		if err != nil && !errors.Is(err, objects.ErrNotFound) && readErr == nil {
			readErr = fmt.Errorf("%w %s: %v", errRead, r, err)
		}
		return o
	}, l.cfg.Limits)
	if readErr != nil {
		return nil, readErr
	}
	omittedChanged := fmt.Sprint(ix.Omitted) != fmt.Sprint(prevOmitted)
	// A device that never had objects is not sent an empty index.
	if SameEntries(ix.Entries, prevEntries) && (gen > 0 || len(ix.Entries) == 0) {
		if omittedChanged {
			if err := l.fleet.SaveOmitted(dev, ix.Omitted); err != nil {
				return nil, err
			}
			l.mu.Lock()
			d.omitted = ix.Omitted
			l.mu.Unlock()
			l.warnOmitted(dev, ix.Omitted)
		}
		return nil, nil
	}
	doc, err := protocol.SignObjectIndex(protocol.ObjectIndex{Device: dev, Generation: gen + 1, Entries: ix.Entries}, l.cfg.Key)
	if err != nil {
		return nil, err
	}
	return &fleetdb.ObjectIndexDoc{Device: dev, Generation: gen + 1, Entries: ix.Entries, Document: doc, Omitted: ix.Omitted,
		OmittedChanged: omittedChanged}, nil
}

// commit stores a batch of indexes in one transaction, then publishes
// them, under pubMu: Connected's republishing of stored documents cannot
// overwrite one with an older one. A hub that dies in between publishes
// them when it connects.
func (l *Link) commit(batch []fleetdb.ObjectIndexDoc) error {
	l.pubMu.Lock()
	defer l.pubMu.Unlock()
	if err := l.fleet.SaveObjectIndexes(batch); err != nil {
		return err
	}
	l.mu.Lock()
	for _, ix := range batch {
		d := l.device(ix.Device)
		d.generation, d.entries, d.omitted = ix.Generation, ix.Entries, ix.Omitted
	}
	l.mu.Unlock()
	for _, ix := range batch {
		l.publish(l.cfg.Topics.Device(ix.Device, protocol.KindObjects), true, ix.Document)
		if ix.OmittedChanged {
			l.warnOmitted(ix.Device, ix.Omitted)
		}
	}
	return nil
}

// get reads an object from the source.
func (l *Link) get(r objects.Ref) (*objects.Object, error) {
	if l.cfg.Source == nil {
		return nil, &objects.NotFoundError{Ref: r}
	}
	o, err := l.cfg.Source.Get(r)
	if err == nil && o == nil {
		err = &objects.NotFoundError{Ref: r}
	}
	return o, err
}

// setRefs moves a device in the users map from its old refs to its new
// ones; l.mu held.
func (l *Link) setRefs(dev string, old, refs []objects.Ref) {
	for _, r := range old {
		if u := l.users[r]; u != nil {
			delete(u, dev)
			if len(u) == 0 {
				delete(l.users, r)
			}
		}
	}
	for _, r := range refs {
		u := l.users[r]
		if u == nil {
			u = map[string]bool{}
			l.users[r] = u
		}
		u[dev] = true
	}
	l.devices[dev].refs = refs
}

// warnOmitted records, as a Warning event of the device, that its bounds
// left objects out (its pods that use them wait for them).
func (l *Link) warnOmitted(dev string, omitted []string) {
	if len(omitted) == 0 {
		return
	}
	msg := fmt.Sprintf("%d object(s) left out of the device's index: %s", len(omitted), omitted[0])
	if len(omitted) > 1 {
		msg += fmt.Sprintf(" (and %d more: podhub describe device %s)", len(omitted)-1, dev)
	}
	if err := l.fleet.SaveDeviceEvent(dev, "ObjectsOverLimit", msg, l.cfg.Now()); err != nil {
		l.log.Error("storing a device event", "device", dev, "err", err)
	}
	l.log.Warn("objects left out of a device's index", "device", dev, "count", len(omitted), "first", omitted[0])
}

// Index is a device's current index (for tests and describe).
func (l *Link) Index(dev string) (generation int64, entries []protocol.ObjectEntry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d := l.devices[dev]; d != nil {
		return d.generation, d.entries
	}
	return 0, nil
}

// Denied is how many refs devices asked for that were not in their index.
func (l *Link) Denied() int64 { return l.denied.Load() }
