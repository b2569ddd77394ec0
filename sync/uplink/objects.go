package uplink

import (
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/sync/protocol"
)

// The hub's ConfigMaps and Secrets as the device holds them: the index in
// force, the objects opened from their sealed messages, what is still to
// ask for and when. objectSet decides and does no I/O: the agent holds
// its lock, passes the time, and stores, publishes and logs
// (objectlink.go).

// Defaults of the object bounds (config objects.maxObjects, maxBytes).
const (
	DefaultMaxObjects     = 256
	DefaultMaxObjectBytes = 16 << 20
)

// maxObjectDataBytes is the API server's bound on one object's data.
const maxObjectDataBytes = 1 << 20

// The retries of requests the hub left unanswered: an object still
// missing is asked for again after objectRetryMin, doubling up to
// objectRetryMax, for as long as it stays in the index.
const (
	objectRetryMin = 10 * time.Second
	objectRetryMax = 5 * time.Minute
)

// ObjectPendingMax bounds how long the getter says an entry of the index
// is pending (objects.PendingError: a container start waits for it,
// quietly). Past it (the hub cannot answer, the device went offline) the
// getter answers as if the object had never been listed: not found, or
// the version held before; the daemon hears of it (OnObjectsOverdue) and
// says so in an event. A round trip to the hub takes well under a second;
// a minute leaves room for a slow link and a retry (objectRetryMin).
const ObjectPendingMax = time.Minute

// heldObject is an object opened into memory, and the index entry its
// message named.
type heldObject struct {
	entry protocol.ObjectEntry
	obj   *objects.Object
	size  int64
}

type objectSet struct {
	maxObjects int
	maxBytes   int64
	retryMin   time.Duration
	retryMax   time.Duration

	// index is the index in force (nil: none yet); want its entries
	// within maxObjects, by key.
	index *protocol.ObjectIndex
	want  map[string]protocol.ObjectEntry
	// held are the objects kept, by key; bytes their data's size.
	held  map[string]*heldObject
	bytes int64
	// refused are the versions refused for the bound on bytes, by key:
	// not asked for again until another index comes.
	refused map[string]protocol.ObjectEntry
	// backoff is the delay of the next retry, next its time (zero: none
	// due).
	backoff time.Duration
	next    time.Time
	// pending are the entries wanted of which no usable version is held
	// (waiting), by key: since when; overdue those past pendingMax already
	// reported.
	pending    map[string]time.Time
	overdue    map[string]bool
	pendingMax time.Duration
}

func newObjectSet(maxObjects int, maxBytes int64) *objectSet {
	if maxObjects <= 0 {
		maxObjects = DefaultMaxObjects
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxObjectBytes
	}
	return &objectSet{maxObjects: maxObjects, maxBytes: maxBytes, retryMin: objectRetryMin, retryMax: objectRetryMax,
		want: map[string]protocol.ObjectEntry{}, held: map[string]*heldObject{}, refused: map[string]protocol.ObjectEntry{},
		pending: map[string]time.Time{}, overdue: map[string]bool{}, pendingMax: ObjectPendingMax}
}

// generation is the index in force's (0: none).
func (s *objectSet) generation() int64 {
	if s.index == nil {
		return 0
	}
	return s.index.Generation
}

// indexVerdict is what taking an index asks of the agent.
type indexVerdict struct {
	// over: the index lists more objects than the bound; the first
	// maxObjects entries are taken.
	over error
	// keep are the keys of the objects to keep (the store drops the
	// others); drop those dropped from memory; changed what the daemon
	// must hear of.
	keep    map[string]bool
	drop    []string
	changed []objects.Ref
}

// setIndex takes a checked index at now: an older generation than the one
// in force is refused; the same or a newer one replaces it. Objects not in
// it (or beyond the bound) are dropped; the others are kept, an older
// version until its new one comes. The entries of which no usable version
// is held are pending from now (or from when they first were).
func (s *objectSet) setIndex(ix *protocol.ObjectIndex, now time.Time) (indexVerdict, error) {
	var v indexVerdict
	if g := s.generation(); ix.Generation < g {
		return v, fmt.Errorf("stale object index generation %d: generation %d is in force", ix.Generation, g)
	}
	entries := ix.Entries
	if len(entries) > s.maxObjects {
		v.over = fmt.Errorf("objects.maxObjects: the hub's object index (generation %d) lists %d objects, over this device's bound of %d; "+
			"only the first %d are kept, pods using the others wait for them", ix.Generation, len(entries), s.maxObjects, s.maxObjects)
		entries = entries[:s.maxObjects]
	}
	s.index = ix
	s.want = make(map[string]protocol.ObjectEntry, len(entries))
	v.keep = make(map[string]bool, len(entries))
	for _, e := range entries {
		s.want[e.Key()] = e
		v.keep[e.Key()] = true
	}
	s.refused = map[string]protocol.ObjectEntry{}
	for k, h := range s.held {
		if _, ok := s.want[k]; !ok {
			s.bytes -= h.size
			delete(s.held, k)
			v.drop = append(v.drop, k)
			v.changed = append(v.changed, h.obj.Ref)
		}
	}
	for k := range s.pending {
		if e, ok := s.want[k]; !ok || !s.waiting(e) {
			delete(s.pending, k)
			delete(s.overdue, k)
		}
	}
	for k, e := range s.want {
		if _, ok := s.pending[k]; !ok && s.waiting(e) {
			s.pending[k] = now
		}
	}
	return v, nil
}

// waiting tells whether a wanted entry has no usable version held: none,
// or one of another UID (the object was deleted and made again). An older
// version of the same UID serves until the new one comes, as the
// kubelet's watch-fed cache may lag behind the API server; it is not
// waited for.
func (s *objectSet) waiting(e protocol.ObjectEntry) bool {
	h := s.held[e.Key()]
	return h == nil || h.entry.UID != e.UID
}

// satisfied tells whether the object held under e's key is e's version,
// or an immutable object of e's UID: it never changes, so it is never
// asked for again.
func (s *objectSet) satisfied(e protocol.ObjectEntry) bool {
	h := s.held[e.Key()]
	return h != nil && (h.entry.Same(e) || h.obj.Immutable && h.entry.UID == e.UID)
}

// missing are the index's entries (within the bound) not held and not
// refused, in index order.
func (s *objectSet) missing() []protocol.ObjectEntry {
	if s.index == nil {
		return nil
	}
	var out []protocol.ObjectEntry
	for _, e := range s.index.Entries {
		w, ok := s.want[e.Key()]
		if !ok || !w.Same(e) || s.satisfied(e) {
			continue
		}
		if r, ok := s.refused[e.Key()]; ok && r.Same(e) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// accept keeps an opened object if it is an entry of the index in force
// and within the bound on bytes. changed is false for a version already
// held.
func (s *objectSet) accept(e protocol.ObjectEntry, obj *objects.Object) (changed bool, err error) {
	key := e.Key()
	w, ok := s.want[key]
	if !ok || !(w.Same(e) || e.Immutable && w.UID == e.UID) {
		return false, fmt.Errorf("%s (uid %s, resourceVersion %s) is not an entry of the object index in force (generation %d)",
			obj.Ref, e.UID, e.ResourceVersion, s.generation())
	}
	old := s.held[key]
	if old != nil && old.entry.Same(e) {
		return false, nil
	}
	size := int64(obj.Size())
	total := s.bytes + size
	if old != nil {
		total -= old.size
	}
	if total > s.maxBytes {
		// Refused until another index: the getter answers at once.
		s.refused[key] = e
		delete(s.pending, key)
		delete(s.overdue, key)
		return false, boundError{fmt.Errorf("objects.maxBytes: %s (%d bytes of data) would bring the objects kept to %d bytes, over this device's bound of %d; refused",
			obj.Ref, size, total, s.maxBytes)}
	}
	s.held[key] = &heldObject{entry: e, obj: obj, size: size}
	s.bytes = total
	delete(s.refused, key)
	delete(s.pending, key)
	delete(s.overdue, key)
	return true, nil
}

// boundError is an object refused for the device's bound: the operator's
// to hear of, not a forgery's.
type boundError struct{ error }

// get is the object kept under ref at now: the version held; for an
// entry of the index with no usable version held, a *objects.PendingError
// until it has waited pendingMax, then as if it were not listed; for
// anything else, not found.
func (s *objectSet) get(ref objects.Ref, now time.Time) (*objects.Object, error) {
	key := string(ref.Kind) + "/" + ref.Namespace + "/" + ref.Name
	h := s.held[key]
	if since, ok := s.pending[key]; ok && now.Sub(since) < s.pendingMax {
		return nil, &objects.PendingError{Ref: ref, Since: since}
	}
	if h == nil {
		return nil, &objects.NotFoundError{Ref: ref}
	}
	return h.obj, nil
}

// overdueAt reports the pending entries that have waited pendingMax at
// now, each once per wait, and when the next one will (zero: none).
func (s *objectSet) overdueAt(now time.Time) (refs []objects.Ref, next time.Time) {
	for k, since := range s.pending {
		if s.overdue[k] {
			continue
		}
		at := since.Add(s.pendingMax)
		if now.Before(at) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		s.overdue[k] = true
		e := s.want[k]
		refs = append(refs, objects.Ref{Kind: objects.Kind(e.Kind), Namespace: e.Namespace, Name: e.Name})
	}
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs, next
}

// poll says which entries to ask for now, in requests of at most
// protocol.MaxObjectGetRefs, and when to look again (zero: only at the
// next event). event is a new index or connection: what is missing is
// asked for at once and the backoff starts over; otherwise it is asked
// for again once the backoff has passed, and the backoff doubles.
func (s *objectSet) poll(now time.Time, event bool) (batches [][]protocol.ObjectEntry, next time.Time) {
	missing := s.missing()
	if len(missing) == 0 {
		s.next, s.backoff = time.Time{}, 0
		return nil, time.Time{}
	}
	switch {
	case event || s.backoff == 0:
		s.backoff = s.retryMin
	case now.Before(s.next):
		return nil, s.next
	default:
		s.backoff = min(2*s.backoff, s.retryMax)
	}
	s.next = now.Add(s.backoff)
	for len(missing) > 0 {
		n := min(len(missing), protocol.MaxObjectGetRefs)
		batches = append(batches, missing[:n])
		missing = missing[n:]
	}
	return batches, s.next
}

// objectOf makes the object a message's entry and opened data describe,
// refusing data the API server would not have taken: the device writes
// its keys as file names.
func objectOf(e protocol.ObjectEntry, typ string, data map[string][]byte) (*objects.Object, error) {
	obj := &objects.Object{Ref: objects.Ref{Kind: objects.Kind(e.Kind), Namespace: e.Namespace, Name: e.Name},
		UID: e.UID, ResourceVersion: e.ResourceVersion, Immutable: e.Immutable, Type: v1.SecretType(typ), Data: data}
	if obj.Kind == objects.ConfigMap && typ != "" {
		return nil, fmt.Errorf("%s: a type (%q) on a ConfigMap", obj.Ref, clip(typ, 64))
	}
	if len(typ) > 253 || !printable(typ) {
		return nil, fmt.Errorf("%s: type: want at most 253 printable characters", obj.Ref)
	}
	for k := range data {
		if msgs := validation.IsConfigMapKey(k); len(msgs) > 0 {
			return nil, fmt.Errorf("%s: key %q: %s", obj.Ref, clip(k, 64), msgs[0])
		}
	}
	if n := obj.Size(); n > maxObjectDataBytes {
		return nil, fmt.Errorf("%s: %d bytes of data, over the API server's limit of %d", obj.Ref, n, maxObjectDataBytes)
	}
	return obj, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
