package listen

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// eventBuffer is how many events wait for a slow reader before the
// watcher blocks (the eBPF ring buffer keeps filling meanwhile; a
// rescan repairs what it drops).
const eventBuffer = 256

// base is what both paths share: the watched cgroups, the tracker that
// turns observations into transitions, and the events channel.
type base struct {
	logf func(format string, args ...any)
	max  int // cgroups watched at once

	scanMu sync.Mutex // one dump at a time: the tracker's generations assume it
	mu     sync.Mutex // guards t and dirs
	t      *tracker
	dirs   map[uint64]string

	events chan Event
	done   chan struct{}
	once   sync.Once

	byInode bool // match sockets by the inodes the cgroup's processes hold, as before 5.7 (tests)
}

func newBase(maxCgroups int, logf func(string, ...any)) base {
	if logf == nil {
		logf = func(string, ...any) {}
	}
	return base{logf: logf, max: maxCgroups, t: newTracker(), dirs: map[uint64]string{}, events: make(chan Event, eventBuffer), done: make(chan struct{})}
}

func (b *base) Events() <-chan Event { return b.events }

// add starts tracking the cgroup at dir under id, if there is room.
func (b *base) add(id uint64, dir string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.dirs[id]; !ok && len(b.dirs) >= b.max {
		return fmt.Errorf("watch %s: already watching %d cgroups, the most allowed", dir, b.max)
	}
	b.t.watch(id)
	b.dirs[id] = dir
	return nil
}

// remove stops tracking the cgroup; it says whether it was tracked.
func (b *base) remove(id uint64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.dirs[id]
	b.t.unwatch(id)
	delete(b.dirs, id)
	return ok
}

func (b *base) watched() []uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	ids := make([]uint64, 0, len(b.dirs))
	for id := range b.dirs {
		ids = append(ids, id)
	}
	return ids
}

// Rescan dumps the cgroups' listeners with sock_diag and reports what
// changed since the tracker last knew. Every scan starts before the first
// dump, so no dump is older than its scan (an eBPF event that came before
// a dump is in it); the cgroups of one network namespace share its dump.
func (b *base) Rescan(ids ...uint64) error {
	b.scanMu.Lock()
	defer b.scanMu.Unlock()
	select {
	case <-b.done:
		return fmt.Errorf("listen watcher closed")
	default:
	}
	type scan struct {
		id    uint64
		dir   string
		since uint64
	}
	var scans []scan
	var errs []error
	b.mu.Lock()
	for _, id := range ids {
		dir, ok := b.dirs[id]
		if !ok {
			errs = append(errs, fmt.Errorf("cgroup %d is %w", id, ErrNotWatched))
			continue
		}
		scans = append(scans, scan{id, dir, b.t.scanStart()})
	}
	b.mu.Unlock()

	dumps := map[uint64][]dumped{} // by network namespace inode, this call only
	dump := func(nsPath string, nsIno uint64) ([]dumped, error) {
		if got, ok := dumps[nsIno]; ok {
			return got, nil
		}
		_, got, err := dumpListeners(nsPath)
		if err == nil {
			dumps[nsIno] = got
		}
		return got, err
	}
	for _, sc := range scans {
		now, err := listenersIn(sc.dir, b.byInode, dump)
		b.mu.Lock()
		var out []Event
		if err != nil {
			b.t.scanDone()
			errs = append(errs, fmt.Errorf("rescan cgroup %s: %w", sc.dir, err))
		} else {
			out = b.t.scanned(sc.id, sc.since, now, time.Now())
		}
		b.mu.Unlock()
		for _, e := range out {
			b.send(e)
		}
	}
	return errors.Join(errs...)
}

// observe applies an event of the eBPF program and sends it if it
// changed anything.
func (b *base) observe(e Event) {
	b.mu.Lock()
	out, ok := b.t.observe(e)
	b.mu.Unlock()
	if ok {
		b.send(out)
	}
}

func (b *base) send(e Event) {
	select {
	case b.events <- e:
	case <-b.done:
	}
}

// stop makes every send return; it says whether this call stopped the
// watcher (false if it was stopped already). closeEvents closes the
// channel once no sender is left.
func (b *base) stop() bool {
	first := false
	b.once.Do(func() { close(b.done); first = true })
	return first
}

func (b *base) closeEvents() {
	b.scanMu.Lock()
	defer b.scanMu.Unlock()
	close(b.events)
}

// sockDiagWatcher learns listeners only from dumps, when asked.
type sockDiagWatcher struct{ base }

// newSockDiagWatcher checks that this kernel answers sock_diag dumps.
func newSockDiagWatcher(maxCgroups int, logf func(string, ...any)) (*sockDiagWatcher, error) {
	if _, _, err := dumpListeners("/proc/self/ns/net"); err != nil {
		return nil, err
	}
	return &sockDiagWatcher{base: newBase(maxCgroups, logf)}, nil
}

func (w *sockDiagWatcher) Path() Path { return PathSockDiag }

func (w *sockDiagWatcher) Watch(dir string) (uint64, error) {
	id, err := CgroupID(dir)
	if err != nil {
		return 0, err
	}
	if err := w.add(id, dir); err != nil {
		return 0, err
	}
	return id, w.Rescan(id)
}

func (w *sockDiagWatcher) Unwatch(id uint64) error {
	if !w.remove(id) {
		return fmt.Errorf("cgroup %d is %w", id, ErrNotWatched)
	}
	return nil
}

func (w *sockDiagWatcher) Close() error {
	if w.stop() {
		w.closeEvents()
	}
	return nil
}
