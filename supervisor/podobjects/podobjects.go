// Package podobjects gives each pod the ConfigMaps and Secrets it may
// see, by where the pod comes from: a static pod (source file) those its
// manifest directory holds, a hub pod those the hub sent for the device
// (none until the uplink gives a source). A pod never sees the other
// source's objects. It also tells which objects changed, so that the
// pods using them are refreshed or retried.
package podobjects

import (
	"sort"
	"sync"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/objects"
)

// Sources are the device's sources of objects. Its methods may be called
// from any goroutine.
type Sources struct {
	mu    sync.RWMutex
	local map[objects.Ref]*objects.Object
	hub   objects.Getter
	// changed are the changes noted from outside the daemon's loop (the
	// hub's) that it has not taken yet; changedAll: every object may
	// have changed.
	changed    map[objects.Ref]bool
	changedAll bool
	// overdue are the hub objects that stayed pending too long, not yet
	// told on the pods.
	overdue map[objects.Ref]bool
}

// New returns sources with no object.
func New() *Sources { return &Sources{local: map[objects.Ref]*objects.Object{}} }

// SetLocal makes the manifest directory's objects these (already
// validated and bounded) and returns the refs that changed: added,
// removed, or of another version. Local objects live in memory only:
// they are in the operator's files already.
func (s *Sources) SetLocal(objs []*objects.Object) []objects.Ref {
	next := make(map[objects.Ref]*objects.Object, len(objs))
	for _, o := range objs {
		next[o.Ref] = o
	}
	s.mu.Lock()
	prev := s.local
	s.local = next
	s.mu.Unlock()
	return Changed(prev, next)
}

// SetHub sets the getter hub pods read (nil: they find nothing); every
// object may have changed.
func (s *Sources) SetHub(g objects.Getter) {
	s.mu.Lock()
	s.hub = g
	s.changedAll = true
	s.mu.Unlock()
}

// Note records objects that changed outside the loop, for TakeChanged;
// nil: any object may have changed.
func (s *Sources) Note(changed []objects.Ref) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if changed == nil {
		s.changedAll = true
		return
	}
	if s.changed == nil {
		s.changed = map[objects.Ref]bool{}
	}
	for _, r := range changed {
		s.changed[r] = true
	}
}

// TakeChanged returns what Note and SetHub recorded since the last call:
// the refs that changed, or all (every object may have).
func (s *Sources) TakeChanged() (refs []objects.Ref, all bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for r := range s.changed {
		refs = append(refs, r)
	}
	all = s.changedAll
	s.changed, s.changedAll = nil, false
	return refs, all
}

// NoteOverdue notes hub objects the getter stopped waiting for (it
// answers them as not listed from now on); TakeOverdue hands them out.
func (s *Sources) NoteOverdue(refs []objects.Ref) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overdue == nil {
		s.overdue = map[objects.Ref]bool{}
	}
	for _, r := range refs {
		s.overdue[r] = true
	}
}

// TakeOverdue are the refs NoteOverdue noted since the last call, sorted.
func (s *Sources) TakeOverdue() []objects.Ref {
	s.mu.Lock()
	defer s.mu.Unlock()
	refs := make([]objects.Ref, 0, len(s.overdue))
	for r := range s.overdue {
		refs = append(refs, r)
	}
	s.overdue = nil
	sort.Slice(refs, func(i, j int) bool { return refs[i].String() < refs[j].String() })
	return refs
}

// For is the getter of the objects pod may see, by its source
// annotation; it reads the current objects at each Get, so a retry sees
// what arrived since.
func (s *Sources) For(pod *v1.Pod) objects.Getter {
	switch pod.Annotations[manifest.AnnotationSource] {
	case manifest.SourceFile:
		return localGetter{s}
	case manifest.SourceHub:
		return hubGetter{s}
	}
	return none{}
}

type localGetter struct{ s *Sources }

func (g localGetter) Get(r objects.Ref) (*objects.Object, error) {
	g.s.mu.RLock()
	o, ok := g.s.local[r]
	g.s.mu.RUnlock()
	if !ok {
		return nil, &objects.NotFoundError{Ref: r}
	}
	return o, nil
}

type hubGetter struct{ s *Sources }

func (g hubGetter) Get(r objects.Ref) (*objects.Object, error) {
	g.s.mu.RLock()
	hub := g.s.hub
	g.s.mu.RUnlock()
	if hub == nil {
		return nil, &objects.NotFoundError{Ref: r}
	}
	return hub.Get(r)
}

// none is the getter of a pod of no known source: it sees nothing.
type none struct{}

func (none) Get(r objects.Ref) (*objects.Object, error) { return nil, &objects.NotFoundError{Ref: r} }

// Changed are the refs whose object differs between two sets: added,
// removed, or of another UID or resourceVersion.
func Changed(prev, next map[objects.Ref]*objects.Object) []objects.Ref {
	var out []objects.Ref
	for r, o := range next {
		if p, ok := prev[r]; !ok || p.UID != o.UID || p.ResourceVersion != o.ResourceVersion {
			out = append(out, r)
		}
	}
	for r := range prev {
		if _, ok := next[r]; !ok {
			out = append(out, r)
		}
	}
	return out
}

// Uses reports whether pod references any of refs.
func Uses(pod *v1.Pod, refs []objects.Ref) bool {
	if len(refs) == 0 {
		return false
	}
	set := make(map[objects.Ref]bool, len(refs))
	for _, r := range refs {
		set[r] = true
	}
	for _, u := range objects.Refs(pod) {
		if set[u.Ref] {
			return true
		}
	}
	return false
}
