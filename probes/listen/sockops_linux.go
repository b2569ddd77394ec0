package listen

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/perf"
	"github.com/cilium/ebpf/ringbuf"

	"github.com/podvisor/podvisor/probes/bpfcgroup"
)

// eventsPerCgroup sizes the ring buffer: room for this many undelivered
// events per watched cgroup before the program starts dropping them.
const eventsPerCgroup = 8

// sockOpsWatcher learns listeners from sock_ops programs, one per
// watched cgroup, writing to one ring (or perf) buffer.
//
// Nothing is pinned: a bpf_link lives as long as its fd, so a killed
// daemon's programs detach with it and a restarted one attaches afresh,
// then learns the listeners opened meanwhile with a sock_diag dump. On
// kernels without cgroup bpf_link (before 5.7) the attachment outlives
// the process; Watch detaches such leftovers, found by program name.
type sockOpsWatcher struct {
	base
	features Features
	legacy   bool // attach with BPF_PROG_ATTACH even where bpf_link works (tests)

	ring   *ebpf.Map                      // the ring buffer or perf event array the programs write to
	read   func() ([]byte, uint64, error) // sample, samples lost, error
	closeR func() error
	wg     sync.WaitGroup

	progsMu sync.Mutex
	progs   map[uint64]bpfcgroup.Attachments

	pending map[uint64]bool // cgroups with a hinted rescan scheduled; guarded by mu
}

func newSockOpsWatcher(f Features, maxCgroups int, logf func(string, ...any)) (*sockOpsWatcher, error) {
	if err := f.EBPFUsable(); err != nil {
		return nil, err
	}
	w := &sockOpsWatcher{base: newBase(maxCgroups, logf), features: f, progs: map[uint64]bpfcgroup.Attachments{}, pending: map[uint64]bool{}}
	if err := w.openEvents(maxCgroups); err != nil {
		return nil, err
	}
	w.wg.Add(1)
	go w.readLoop()
	return w, nil
}

// openEvents makes the output map, sized for maxCgroups, and its reader.
func (w *sockOpsWatcher) openEvents(maxCgroups int) error {
	page := os.Getpagesize()
	if w.features.RingBuf {
		size := page
		for size < max(maxCgroups, 1)*eventsPerCgroup*(wireEventSize+8) {
			size *= 2
		}
		m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "podvisor_listen", Type: ebpf.RingBuf, MaxEntries: uint32(size)})
		if err != nil {
			return fmt.Errorf("make ring buffer: %w", err)
		}
		r, err := ringbuf.NewReader(m)
		if err != nil {
			m.Close()
			return fmt.Errorf("read ring buffer: %w", err)
		}
		w.ring, w.closeR = m, r.Close
		w.read = func() ([]byte, uint64, error) {
			rec, err := r.Read()
			return rec.RawSample, 0, err
		}
		return nil
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: "podvisor_listen", Type: ebpf.PerfEventArray})
	if err != nil {
		return fmt.Errorf("make perf event array: %w", err)
	}
	r, err := perf.NewReader(m, page)
	if err != nil {
		m.Close()
		return fmt.Errorf("read perf buffer: %w", err)
	}
	w.ring, w.closeR = m, r.Close
	w.read = func() ([]byte, uint64, error) {
		rec, err := r.Read()
		return rec.RawSample, rec.LostSamples, err
	}
	return nil
}

func (w *sockOpsWatcher) readLoop() {
	defer w.wg.Done()
	for {
		sample, lost, err := w.read()
		if errors.Is(err, os.ErrClosed) {
			return
		}
		if err != nil {
			w.logf("listen watcher: read events: %v", err)
			continue
		}
		if lost > 0 {
			w.logf("listen watcher: %d events lost; rescanning every watched cgroup", lost)
			go w.rescanAll()
			continue
		}
		e, ok := decodeWireEvent(sample)
		if !ok {
			continue
		}
		if e.Kind == releaseHint {
			w.hinted(e.Cgroup)
			continue
		}
		e.Seen = time.Now()
		w.observe(e)
	}
}

// releaseRescanDelay lets the close that follows a release hint finish
// (the hook runs before the protocol unhashes the listener) before the
// dump looks.
const releaseRescanDelay = 5 * time.Millisecond

// hinted answers a release hint: when the cgroup has listeners known only
// from a dump, one of them may be closing, and only a dump can tell.
func (w *sockOpsWatcher) hinted(id uint64) {
	w.mu.Lock()
	need := w.t.hasDumped(id) && !w.pending[id]
	if need {
		w.pending[id] = true
	}
	w.mu.Unlock()
	if !need {
		return
	}
	time.AfterFunc(releaseRescanDelay, func() {
		w.mu.Lock()
		delete(w.pending, id)
		_, watched := w.dirs[id]
		w.mu.Unlock()
		if !watched {
			return // unwatched or closed meanwhile
		}
		if err := w.Rescan(id); err != nil {
			w.logf("listen watcher: %v", err)
		}
	})
}

func (w *sockOpsWatcher) rescanAll() {
	for _, id := range w.watched() {
		if err := w.Rescan(id); err != nil {
			w.logf("listen watcher: %v", err)
		}
	}
}

func (w *sockOpsWatcher) Path() Path { return PathEBPF }

// Watch attaches a program to dir, then dumps the listeners already
// open there (a dump failure is logged: the events still come).
func (w *sockOpsWatcher) Watch(dir string) (uint64, error) {
	id, err := CgroupID(dir)
	if err != nil {
		return 0, err
	}
	w.progsMu.Lock()
	if _, ok := w.progs[id]; ok {
		w.progsMu.Unlock()
		return id, nil
	}
	if err := w.add(id, dir); err != nil { // before attaching: the first event must find it
		w.progsMu.Unlock()
		return 0, err
	}
	a, err := w.attach(dir, id)
	if err != nil {
		w.remove(id)
		w.progsMu.Unlock()
		return 0, err
	}
	w.progs[id] = a
	w.progsMu.Unlock()
	if err := w.Rescan(id); err != nil {
		w.logf("listen watcher: listeners open before %s was watched are not known: %v", dir, err)
	}
	return id, nil
}

// attach loads and attaches the cgroup's programs: sock_ops, and
// sock_release where the kernel has it (5.9+).
func (w *sockOpsWatcher) attach(dir string, id uint64) (bpfcgroup.Attachments, error) {
	f := w.features
	var a bpfcgroup.Attachments
	logf := func(format string, args ...any) { w.logf("listen watcher: "+format, args...) }
	err := a.Add(dir, &ebpf.ProgramSpec{Name: progName, Type: ebpf.SockOps, AttachType: ebpf.AttachCGroupSockOps,
		Instructions: sockOpsProgram(id, output{w.ring.FD(), f.RingBuf, f.NetNSCookie}), License: progLicense}, w.legacy, logf)
	if err != nil {
		return bpfcgroup.Attachments{}, err
	}
	if f.SockRelease {
		err := a.Add(dir, &ebpf.ProgramSpec{Name: progReleaseName, Type: ebpf.CGroupSock, AttachType: ebpf.AttachCgroupInetSockRelease,
			Instructions: sockReleaseProgram(id, output{w.ring.FD(), f.RingBuf, f.ReleaseNetNS}), License: progLicense}, w.legacy, logf)
		if err != nil {
			w.logf("listen watcher: the close of a listener open before %s was watched shows at the next rescan only: %v", dir, err)
		}
	}
	return a, nil
}

func (w *sockOpsWatcher) Unwatch(id uint64) error {
	w.progsMu.Lock()
	a, ok := w.progs[id]
	delete(w.progs, id)
	w.progsMu.Unlock()
	w.remove(id)
	if !ok {
		return fmt.Errorf("cgroup %d is %w", id, ErrNotWatched)
	}
	return a.Close()
}

func (w *sockOpsWatcher) Close() error {
	if !w.stop() {
		return nil
	}
	err := w.closeR()
	w.wg.Wait()
	w.progsMu.Lock()
	for id, a := range w.progs {
		err = errors.Join(err, a.Close())
		delete(w.progs, id)
	}
	w.progsMu.Unlock()
	w.closeEvents()
	return errors.Join(err, w.ring.Close())
}
