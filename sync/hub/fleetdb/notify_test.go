package fleetdb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// changeBound is how long a change may take from one replica's commit to
// another's feed before a test fails (two shared cores under load; the
// times measured are logged).
const changeBound = 15 * time.Second

// replicaPair opens two fleets on one PostgreSQL database, as two podhub
// replicas (each its own pool and instance), with devices added; b
// listens, and a subscription to its feed is returned.
func replicaPair(t *testing.T, devices ...string) (a, b *Fleet, sub *fleetwatch.Sub) {
	t.Helper()
	url := pgtest.URL(t)
	for _, p := range []**Fleet{&a, &b} {
		f, err := OpenStore(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		*p = f
	}
	for _, d := range devices {
		if err := a.AddDevice(d); err != nil {
			t.Fatal(err)
		}
	}
	sub = b.Changes().Subscribe()
	t.Cleanup(sub.Close)
	listenPID(t, b, 0) // Changes returned once it listened
	return a, b, sub
}

// listenPID waits until f listens on a connection other than not, and
// returns its server process ID.
func listenPID(t *testing.T, f *Fleet, not uint32) uint32 {
	t.Helper()
	deadline := time.Now().Add(changeBound)
	for {
		f.replicas.mu.Lock()
		pid := f.replicas.pid
		f.replicas.mu.Unlock()
		if pid != 0 && pid != not {
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not LISTEN for the other replicas' changes within %s", changeBound)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// awaitChange takes sub's changes until one of device carries what, and
// returns the changes taken on the way (that one included).
func awaitChange(t *testing.T, sub *fleetwatch.Sub, device string, what fleetwatch.What, waitingFor string) []fleetwatch.Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), changeBound)
	defer cancel()
	var seen []fleetwatch.Change
	for {
		cs, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for %s (a %v change of device %q) on the other replica's feed: %v; saw %v", waitingFor, what, device, err, seen)
		}
		seen = append(seen, cs...)
		for _, c := range cs {
			if c.Device == device && c.What&what == what {
				return seen
			}
		}
	}
}

// A write through one replica reaches the other's feed: measured over
// 200 writes, each waited for before the next. A replica does not hear
// its own writes back (its feed had them at commit).
func TestReplicasHearEachOthersWrites(t *testing.T) {
	a, b, sub := replicaPair(t, "dev", "dev-b")
	const writes = 200
	// Timed from the write's call (the write included) and from its
	// return (the commit).
	fromCall := make([]time.Duration, 0, writes)
	fromCommit := make([]time.Duration, 0, writes)
	for i := range writes {
		called := time.Now()
		if err := a.SetLabels("dev", map[string]string{"n": strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
		committed := time.Now()
		awaitChange(t, sub, "dev", fleetwatch.Node, fmt.Sprintf("write %d", i))
		fromCall = append(fromCall, time.Since(called))
		fromCommit = append(fromCommit, time.Since(committed))
	}
	for _, d := range []struct {
		from string
		took []time.Duration
	}{{"call", fromCall}, {"commit", fromCommit}} {
		slices.Sort(d.took)
		t.Logf("from the write's %s to the other replica's feed: %s median, %s 99th, %s max over %d writes",
			d.from, d.took[writes/2], d.took[writes*99/100], d.took[writes-1], writes)
	}

	// A's feed: its own write once (at commit, not again by NOTIFY), then
	// B's. Notifications come in commit order: A's own would be heard
	// before B's.
	subA := a.Changes().Subscribe()
	defer subA.Close()
	listenPID(t, a, 0)
	before := a.Changes().Seq()
	if err := a.SetCordon("dev", true); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCordon("dev-b", true); err != nil {
		t.Fatal(err)
	}
	awaitChange(t, subA, "dev-b", fleetwatch.Node, "B's cordon on A")
	awaitChange(t, sub, "dev", fleetwatch.Node, "A's cordon on B")
	if n := a.Changes().Seq() - before; n != 2 {
		t.Fatalf("A's feed had %d publications for its own write and B's, want 2 (its own heard back?)", n)
	}

	// A publication outside the store (a scheduling pass) is relayed.
	a.Changes().Publish("", fleetwatch.Workloads)
	awaitChange(t, sub, "", fleetwatch.Workloads, "a scheduling pass's change relayed")
}

// A write that rolls back is never heard by the other replica: neither a
// fleet write refused halfway (its transaction had written), nor a bare
// pg_notify in a transaction rolled back.
func TestReplicasNeverHearARollback(t *testing.T) {
	a, _, sub := replicaPair(t, "dev", "acked")
	// Refused after touching the device in its transaction.
	if _, err := a.SaveAck(&protocol.Ack{Device: "acked", Generation: 5, ObservedGeneration: 5}, time.Now()); !errors.Is(err, ErrNotPublished) {
		t.Fatalf("SaveAck of an unpublished generation: %v, want ErrNotPublished", err)
	}
	tx, err := a.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	ghost := fleetwatch.Encode(a.replicas.instance, fleetwatch.Notes{"ghost": {Device: "ghost", What: fleetwatch.Node}})
	if _, err := tx.Exec(`SELECT pg_notify(?, ?)`, ChangeChannel, ghost[0]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// Delivered in commit order: what was sent before comes before this.
	if err := a.SetLabels("dev", map[string]string{"marker": "1"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range awaitChange(t, sub, "dev", fleetwatch.Node, "the committed write after the rollbacks") {
		if c.Device == "acked" || c.Device == "ghost" {
			t.Fatalf("the other replica heard %v, a write that rolled back", c)
		}
	}
}

// The listening connection killed (pg_terminate_backend): the replica
// reconnects, its readers are told to resync everything (what was sent
// meanwhile is lost), and writes are heard again.
func TestReplicaListenerReconnectsAndResyncs(t *testing.T) {
	a, b, sub := replicaPair(t, "dev")
	pid := listenPID(t, b, 0)
	var ended bool
	killed := time.Now()
	if err := a.db.QueryRow(`SELECT pg_terminate_backend(?)`, int64(pid)).Scan(&ended); err != nil || !ended {
		t.Fatalf("pg_terminate_backend(%d) = %v, %v", pid, ended, err)
	}
	awaitChange(t, sub, "", fleetwatch.Everything, "the resync after the listener's reconnection")
	t.Logf("the killed listener was back, its readers told to resync, after %s", time.Since(killed))
	listenPID(t, b, pid)
	if err := a.SetCordon("dev", true); err != nil {
		t.Fatal(err)
	}
	awaitChange(t, sub, "dev", fleetwatch.Node, "a write after the reconnection")
}

// On SQLite (one replica) nothing listens nor notifies.
func TestSQLiteHasNoReplicaFeed(t *testing.T) {
	f := testFleet(t, "dev")
	f.Changes()
	if f.replicas != nil {
		t.Fatal("an SQLite fleet follows other replicas")
	}
}

// What the object links keep, stored through one replica (a device's
// desired document, its object index), reaches the other's links as
// Objects signals of the device, and none of its readers; a write of
// more devices than maxObjectsNotes is one signal of the fleet. Signals
// of the fleet published outside the store (a pass asked for) are
// relayed alike.
func TestObjectLinkChangesReachTheOtherReplicasSignals(t *testing.T) {
	a, b, sub := replicaPair(t, "dev")
	signals := make(chan fleetwatch.Change, 64)
	b.Changes().OnSignal(func(d string, w fleetwatch.What) { signals <- fleetwatch.Change{Device: d, What: w} })
	await := func(want fleetwatch.Change, what string) {
		t.Helper()
		start := time.Now()
		for {
			select {
			case got := <-signals:
				if got == want {
					t.Logf("%s: heard on the other replica after %s", what, time.Since(start))
					return
				}
			case <-time.After(changeBound):
				t.Fatalf("%s: no %v signal on the other replica within %s", what, want, changeBound)
			}
		}
	}
	if err := a.SaveDesired(DesiredDoc{Device: "dev", Generation: 1, Document: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	await(fleetwatch.Change{Device: "dev", What: fleetwatch.Objects}, "a desired document")
	if err := a.SaveObjectIndex("dev", 1, nil, []byte("{}"), nil); err != nil {
		t.Fatal(err)
	}
	await(fleetwatch.Change{Device: "dev", What: fleetwatch.Objects}, "an object index")
	var docs []DesiredDoc
	for i := range maxObjectsNotes + 1 {
		docs = append(docs, DesiredDoc{Device: fmt.Sprintf("many-%d", i), Generation: 1, Document: []byte("{}")})
	}
	if err := a.SaveDesiredAll(docs); err != nil {
		t.Fatal(err)
	}
	await(fleetwatch.Change{What: fleetwatch.Objects}, fmt.Sprintf("%d desired documents at once", len(docs)))
	a.Changes().Signal(fleetwatch.SchedulePass)
	await(fleetwatch.Change{What: fleetwatch.SchedulePass}, "a pass asked for")
	if err := a.SetCordon("dev", true); err != nil { // a change readers are told of, after the signals
		t.Fatal(err)
	}
	seen := awaitChange(t, sub, "dev", fleetwatch.Node, "a cordon after the signals")
	for _, c := range seen {
		if c.What&^(fleetwatch.Node|fleetwatch.Pods|fleetwatch.Events|fleetwatch.Workloads) != 0 || c.Device != "dev" {
			t.Fatalf("the other replica's readers were told %v, want only the cordon (no signal)", seen)
		}
	}
}

// A relayed note whose pg_notify fails (a lost connection, a timeout) is
// not dropped: it is sent again, after a bounded backoff, joined with
// what was relayed meanwhile; Close stops the retries.
func TestRelayRetriesAFailedNotify(t *testing.T) {
	r := newReplicas("")
	r.retryFirst, r.retryMax = time.Millisecond, 4*time.Millisecond
	sent := make(chan string, 16)
	failures := 3
	r.notify = func(_ context.Context, payload string) error {
		if failures > 0 { // only send's goroutine calls it
			failures--
			return errors.New("conn closed")
		}
		sent <- payload
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.done.Add(1)
	go func() { defer r.done.Done(); r.send(ctx, nil) }()
	defer func() { cancel(); r.done.Wait() }()
	r.relay(fleetwatch.Note{What: fleetwatch.Workloads})
	select {
	case p := <-sent:
		_, notes, err := fleetwatch.Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(notes) != 1 || notes[0].What&fleetwatch.Workloads == 0 {
			t.Errorf("relayed after the failures: %v, want the scheduling pass's signal", notes)
		}
	case <-time.After(changeBound):
		t.Fatalf("the relayed note was not sent again within %s after its pg_notify failed", changeBound)
	}
}

// A relay that keeps failing stops on close.
func TestRelayRetriesStopOnClose(t *testing.T) {
	r := newReplicas("")
	r.retryFirst, r.retryMax = time.Millisecond, time.Millisecond
	r.notify = func(context.Context, string) error { return errors.New("conn closed") }
	ctx, cancel := context.WithCancel(context.Background())
	r.done.Add(1)
	go func() { defer r.done.Done(); r.send(ctx, nil) }()
	r.relay(fleetwatch.Note{What: fleetwatch.Workloads})
	cancel()
	stopped := make(chan struct{})
	go func() { r.done.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(changeBound):
		t.Fatalf("the relay did not stop within %s of its close while failing", changeBound)
	}
}
