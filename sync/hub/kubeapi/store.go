package kubeapi

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
)

// kobject is a typed API object (*v1.Pod, *appsv1.Deployment…).
type kobject interface {
	metav1.Object
	runtime.Object
}

// object is one stored object with its resourceVersion and JSON.
type object struct {
	res    *resource
	source string // who produced it: a device, or hub/ns (refresh.go)
	key    string // namespace/name
	obj    kobject
	raw    []byte // JSON, resourceVersion included
	hash   [32]byte
	rv     uint64
	fields fields.Set
	// device and origName: where a pod runs and its name there (pods/log).
	device, origName string
}

// Watch event types, as the API server names them.
const (
	added    = "ADDED"
	modified = "MODIFIED"
	deleted  = "DELETED"
	bookmark = "BOOKMARK"
	errorEv  = "ERROR"
)

// event is one change, kept in the ring for watches to resume from.
type event struct {
	typ string
	rv  uint64
	obj *object
	old *object // the object before a MODIFIED or DELETED
}

// store holds the objects served, their resourceVersions, a ring of
// recent changes per resource and the watches open.
type store struct {
	mu   sync.RWMutex
	rv   uint64
	base uint64 // the first resourceVersion
	objs map[*resource]map[string]*object
	// keys are each resource's keys in order, for lists in chunks.
	keys map[*resource][]string
	// rings: one per resource, as the API server keeps a watch cache
	// per resource, so that nodes' heartbeats never push a pod watch's
	// changes out.
	rings    map[*resource]*ring
	ringSize int
	// watchers receive changes as they happen; a full channel cuts one.
	watchers map[*watcher]struct{}
}

// ring is one resource's recent changes.
type ring struct {
	events []event
	next   int    // where the ring writes next
	full   bool   // the ring has wrapped
	floor  uint64 // every change after floor is in the ring
}

// newStore starts the resourceVersions at the start time in nanoseconds
// (whole seconds × 1e9): a version after a hub restart is above every one
// from before, so a client resuming with an old one gets 410 and relists.
func newStore(ringSize int, start time.Time) *store {
	base := uint64(start.Unix()) * 1e9
	return &store{rv: base, base: base, objs: map[*resource]map[string]*object{}, keys: map[*resource][]string{},
		rings: map[*resource]*ring{}, ringSize: ringSize, watchers: map[*watcher]struct{}{}}
}

// keyOf is an object's key: namespace/name ("/name" when cluster-scoped).
func keyOf(ns, name string) string { return ns + "/" + name }

// replace makes source's objects of res exactly objs: each new or
// changed one (by the hash of its JSON) gets the next resourceVersion,
// and those source no longer has are deleted.
func (s *store) replace(res *resource, source string, objs []*object) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.objs[res]
	if m == nil {
		m = map[string]*object{}
		s.objs[res] = m
	}
	seen := make(map[string]bool, len(objs))
	for _, o := range objs {
		o.res, o.source = res, source
		o.key = keyOf(o.obj.GetNamespace(), o.obj.GetName())
		if seen[o.key] {
			continue // the first of a name wins within a source
		}
		seen[o.key] = true
		o.obj.SetResourceVersion("")
		b, err := json.Marshal(o.obj)
		if err != nil {
			continue
		}
		o.hash = sha256.Sum256(b)
		old := m[o.key]
		if old != nil && old.hash == o.hash {
			continue
		}
		s.rv++
		o.rv = s.rv
		o.obj.SetResourceVersion(fmt.Sprint(o.rv))
		if o.raw, err = json.Marshal(o.obj); err != nil {
			continue
		}
		m[o.key] = o
		typ := modified
		if old == nil {
			typ = added
			keys := s.keys[res]
			i := sort.SearchStrings(keys, o.key)
			s.keys[res] = slices.Insert(keys, i, o.key)
		}
		s.publish(event{typ: typ, rv: o.rv, obj: o, old: old})
	}
	for key, old := range m {
		if old.source != source || seen[key] {
			continue
		}
		delete(m, key)
		keys := s.keys[res]
		if i := sort.SearchStrings(keys, key); i < len(keys) && keys[i] == key {
			s.keys[res] = slices.Delete(keys, i, i+1)
		}
		s.rv++
		// A deleted object carries the deletion's resourceVersion, as
		// the API server's watch cache sends it.
		gone := *old
		gone.rv = s.rv
		gone.obj = old.obj.DeepCopyObject().(kobject)
		gone.obj.SetResourceVersion(fmt.Sprint(gone.rv))
		gone.raw, _ = json.Marshal(gone.obj)
		s.publish(event{typ: deleted, rv: gone.rv, obj: &gone, old: old})
	}
}

// publish records a change in the ring and tells the watches of its
// resource; one whose buffer is full is cut (it relists), never waited on.
func (s *store) publish(e event) {
	r := s.ringOf(e.obj.res)
	if r.full {
		r.floor = r.events[r.next].rv
	}
	r.events[r.next] = e
	r.next++
	if r.next == len(r.events) {
		r.next, r.full = 0, true
	}
	for w := range s.watchers {
		if w.res != e.obj.res {
			continue
		}
		select {
		case w.ch <- e:
		default:
			s.cut(w)
		}
	}
}

// since lists the changes of res after rv, or 410 Expired when the ring
// no longer holds them all.
func (s *store) since(res *resource, rv uint64) ([]event, error) {
	r := s.ringOf(res)
	if rv < r.floor {
		return nil, apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d)", rv, r.floor+1))
	}
	var out []event
	n := r.next
	if r.full {
		n = len(r.events)
	}
	for i := 0; i < n; i++ {
		if e := r.events[(r.next-n+i+len(r.events))%len(r.events)]; e.rv > rv {
			out = append(out, e)
		}
	}
	return out, nil
}

// ringOf is res's ring, made at its first change: none of its changes
// was dropped before, so its floor is the first version.
func (s *store) ringOf(res *resource) *ring {
	r := s.rings[res]
	if r == nil {
		r = &ring{events: make([]event, s.ringSize), floor: s.base}
		s.rings[res] = r
	}
	return r
}

// list is res's objects in namespace ns ("" for all) matching the
// selectors, sorted by namespace and name, from the key start on, at
// most limit of them (0: all); more counts the matching ones left out.
func (s *store) list(res *resource, ns string, ls labels.Selector, fs fields.Selector, start string, limit int) (out []*object, rv uint64, more int) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	keys, m := s.keys[res], s.objs[res]
	for _, k := range keys[sort.SearchStrings(keys, start):] {
		if o := m[k]; o.matches(ns, ls, fs) {
			if limit > 0 && len(out) == limit {
				more++
			} else {
				out = append(out, o)
			}
		}
	}
	return out, s.rv, more
}

// get is one object, or nil.
func (s *store) get(res *resource, ns, name string) *object {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.objs[res][keyOf(ns, name)]
}

// current is the newest resourceVersion.
func (s *store) current() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.rv
}

// matches says an object is in ns and selected.
func (o *object) matches(ns string, ls labels.Selector, fs fields.Selector) bool {
	if ns != "" && o.obj.GetNamespace() != ns {
		return false
	}
	if ls != nil && !ls.Matches(labels.Set(o.obj.GetLabels())) {
		return false
	}
	return fs == nil || fs.Matches(o.fields)
}

// watcher is one open watch.
type watcher struct {
	res *resource
	ch  chan event
	// gone is closed when the store cuts the watch (its buffer filled)
	// or closes.
	gone   chan struct{}
	closed bool
}

// watchBuffer is how many changes a watch may fall behind before it is
// cut.
const watchBuffer = 1024

// watch registers a watch of res and returns, under the same lock, the
// changes after rv it must replay first (nil when initial is asked: the
// caller lists instead).
func (s *store) watch(res *resource, rv uint64, fromList bool) (*watcher, []event, []*object, uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var replay []event
	var initial []*object
	if fromList {
		for _, k := range s.keys[res] {
			initial = append(initial, s.objs[res][k])
		}
	} else {
		var err error
		if replay, err = s.since(res, rv); err != nil {
			return nil, nil, nil, 0, err
		}
	}
	w := &watcher{res: res, ch: make(chan event, watchBuffer), gone: make(chan struct{})}
	s.watchers[w] = struct{}{}
	return w, replay, initial, s.rv, nil
}

// unwatch ends a watch.
func (s *store) unwatch(w *watcher) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut(w)
}

func (s *store) cut(w *watcher) {
	if !w.closed {
		w.closed = true
		close(w.gone)
		delete(s.watchers, w)
	}
}

// closeWatchers ends every watch (the server closes).
func (s *store) closeWatchers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for w := range s.watchers {
		s.cut(w)
	}
}
