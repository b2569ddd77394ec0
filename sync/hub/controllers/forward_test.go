package controllers

import (
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// fakeReplica is one replica's scheduler over its own handle of one
// fleet file, its feed's relay a fake transport to the other's feed (as
// PostgreSQL's NOTIFY carries it), wired as hub.UseReplica wires it.
type fakeReplica struct {
	fleet     *fleetdb.Fleet
	workloads *workloaddb.Store
	sched     *Scheduler
	leading   atomic.Bool
	mu        sync.Mutex
	relayed   []fleetwatch.Note // what its feed told the other
	signalled []fleetwatch.What // what its OnSignal heard
	heard     chan struct{}     // poked at each signal heard
}

func newFakeReplica(t *testing.T, path string) *fakeReplica {
	fleet, err := fleetdb.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	r := &fakeReplica{fleet: fleet, workloads: workloaddb.New(fleet.SQL()), heard: make(chan struct{}, 1)}
	r.sched = New(Config{}, fleet, r.workloads, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	feed := fleet.Changes()
	r.sched.SetGate(r.leading.Load, func() { feed.Signal(fleetwatch.SchedulePass) })
	feed.OnSignal(func(_ string, w fleetwatch.What) {
		r.mu.Lock()
		r.signalled = append(r.signalled, w)
		r.mu.Unlock()
		select {
		case r.heard <- struct{}{}:
		default:
		}
		if w&fleetwatch.SchedulePass != 0 && r.leading.Load() {
			r.sched.Reschedule()
		}
	})
	t.Cleanup(r.sched.Close)
	return r
}

// connect makes a's relay deliver to b's feed and b's to a's.
func connect(a, b *fakeReplica) {
	relay := func(from, to *fakeReplica) func(fleetwatch.Note) {
		return func(n fleetwatch.Note) {
			from.mu.Lock()
			from.relayed = append(from.relayed, n)
			from.mu.Unlock()
			to.fleet.Changes().Receive([]fleetwatch.Note{n})
		}
	}
	a.fleet.Changes().SetRelay(relay(a, b))
	b.fleet.Changes().SetRelay(relay(b, a))
}

// waitHeard waits (10 s at most) until r heard a signal.
func (r *fakeReplica) waitHeard(t *testing.T, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; {
		r.mu.Lock()
		n := len(r.signalled)
		r.mu.Unlock()
		if n > 0 {
			return
		}
		select {
		case <-r.heard:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("waited 10s for %s", what)
		}
	}
}

// forget drops what r relayed and heard so far.
func (r *fakeReplica) forget() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.relayed, r.signalled = nil, nil
}

func (r *fakeReplica) notes() ([]fleetwatch.Note, []fleetwatch.What) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]fleetwatch.Note(nil), r.relayed...), append([]fleetwatch.What(nil), r.signalled...)
}

// A pass asked of a replica that does not lead (an apply through it) is
// signalled to the leader, which runs it; the leader's pass publishes
// its Workloads change to the other replica's readers but signals
// nothing, so no pass follows from it, on either side.
func TestAPassAskedOfAReplicaThatDoesNotLeadRunsOnTheLeader(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	a, b := newFakeReplica(t, path), newFakeReplica(t, path)
	connect(a, b)
	readers := a.fleet.Changes().Subscribe() // replica A's readers
	defer readers.Close()
	// Neither leads at first: each loop's first pass is handed to the
	// other. Once both were heard, B's own first pass is behind it, so
	// only a signal can make B pass after it leads.
	a.sched.Start()
	b.sched.Start()
	a.waitHeard(t, "B's first pass handed to A")
	b.waitHeard(t, "A's first pass handed to B")
	a.forget()
	b.forget()
	b.leading.Store(true)

	objs, err := kinds.Decode("web.yaml", []byte(workloadfile.Deployment("web", 2, `containers: [{name: c, image: "process:///bin/sleep"}]`)))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.workloads.ApplyObjects(objs, time.Now()); err != nil {
		t.Fatal(err)
	}
	a.sched.Reschedule() // as the API does after an apply through A
	start := time.Now()
	for deadline := time.Now().Add(10 * time.Second); ; {
		pods, err := a.workloads.HubPods()
		if err != nil {
			t.Fatal(err)
		}
		if len(pods) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader made %d of web's 2 pods within 10 s of an apply through the other replica", len(pods))
		}
		select {
		case <-readers.Ready():
		case <-time.After(time.Until(deadline)):
		}
	}
	t.Logf("the leader's pass stored the apply's pods %s after it was asked of the other replica", time.Since(start))
	// A's readers hear of the leader's pass (its Workloads change).
	if got := readers.Take(); len(got) == 0 {
		t.Fatal("replica A's readers heard nothing of the leader's pass")
	}

	aRelayed, aSignalled := a.notes()
	bRelayed, bSignalled := b.notes()
	for _, n := range aRelayed {
		if n != (fleetwatch.Note{What: fleetwatch.SchedulePass}) {
			t.Errorf("replica A, which does not lead, told the other %v; want only SchedulePass signals", n)
		}
	}
	if len(aRelayed) == 0 || len(bSignalled) != len(aRelayed) {
		t.Errorf("A signalled %d passes, the leader heard %d; want them all, at least one", len(aRelayed), len(bSignalled))
	}
	for _, n := range bRelayed {
		if n != (fleetwatch.Note{What: fleetwatch.Workloads}) {
			t.Errorf("the leader told the other %v; want only its passes' Workloads changes, no signal", n)
		}
	}
	if len(aSignalled) != 0 {
		t.Errorf("replica A heard signals %v from the leader, whose passes signal nothing", aSignalled)
	}
}

// Without a forward (SQLite's single replica, or a hub alone) a pass
// the gate refuses is dropped, as before: nothing is signalled.
func TestAGatedSchedulerWithoutForwardDropsThePass(t *testing.T) {
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	var relayed atomic.Int32
	fleet.Changes().SetRelay(func(fleetwatch.Note) { relayed.Add(1) })
	asked := make(chan struct{}, 1)
	s := New(Config{}, fleet, workloaddb.New(fleet.SQL()), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.SetGate(func() bool {
		select {
		case asked <- struct{}{}:
		default:
		}
		return false
	}, nil)
	s.Start()
	defer s.Close()
	select {
	case <-asked:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not consult its gate within 10 s of Start")
	}
	if n := relayed.Load(); n != 0 {
		t.Fatalf("a refused pass without a forward relayed %d notes", n)
	}
}

// Close waits for the loop's round under way (a pass): a replica that
// hands the leader lease over stops scheduling first, so the next
// leader's passes never run beside its last one.
func TestCloseWaitsForThePassUnderWay(t *testing.T) {
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	s := New(Config{}, fleet, workloaddb.New(fleet.SQL()), nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	s.SetGate(func() bool {
		once.Do(func() { close(entered); <-release })
		return false
	}, nil)
	s.Start()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the loop did not start a round within 10 s of Start")
	}
	closed := make(chan struct{})
	go func() { s.Close(); close(closed) }()
	select {
	case <-closed:
		close(release)
		t.Fatal("Close returned while the loop's round was under way")
	case <-time.After(200 * time.Millisecond): // Close is still waiting, as it should
	}
	close(release)
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10 s of the round's end")
	}
}
