package uplink

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
)

// fakeNow is a clock a test moves.
type fakeNow struct{ t time.Time }

func (c *fakeNow) now() time.Time        { return c.t }
func (c *fakeNow) add(d time.Duration)   { c.t = c.t.Add(d) }
func getErr(a *Agent, name string) error { _, err := a.Objects().Get(secretRef(name)); return err }
func getRV(a *Agent, name string) string {
	o, err := a.Objects().Get(secretRef(name))
	if err != nil {
		return "error: " + err.Error()
	}
	return o.ResourceVersion
}

// The getter tells an entry of the index not received yet (pending) from
// an object the hub does not list (not found); an older version of the
// same object serves until its new one comes, one of another UID (made
// again) is pending; past ObjectPendingMax the getter answers as if the
// entry were not listed, and reports it overdue once.
func TestGetterPendingAndNotFound(t *testing.T) {
	h := newObjHub(t)
	a, _ := objAgent(t, t.TempDir(), h, nil)
	clock := &fakeNow{t: time.Unix(1000, 0)}
	a.now = clock.now

	// No index yet: nothing is pending, nothing found.
	if err := getErr(a, "db"); !errors.Is(err, objects.ErrNotFound) || errors.Is(err, objects.ErrPending) {
		t.Fatalf("db with no index: %v", err)
	}
	db, tls, old := secretEntry("db", "1"), secretEntry("tls", "1"), secretEntry("old", "1")
	a.onObjectIndex(nil, h.index(1, old))
	a.onObject(nil, h.object(old, map[string][]byte{"k": []byte("v1")}))
	a.onObjectIndex(nil, h.index(2, db, tls, old))
	err := getErr(a, "db")
	var pe *objects.PendingError
	if !errors.As(err, &pe) || errors.Is(err, objects.ErrNotFound) || !pe.Since.Equal(clock.t) ||
		err.Error() != `secret "db" not yet received from the hub` {
		t.Fatalf("db listed, not received: %v", err)
	}
	if err := getErr(a, "other"); !errors.Is(err, objects.ErrNotFound) || err.Error() != `secret "other" not found` {
		t.Fatalf("other, not listed: %v", err)
	}
	if rv := getRV(a, "old"); rv != "1" {
		t.Fatalf("old, held: %s", rv)
	}

	// A new version of the same UID: the held one serves meanwhile.
	clock.add(10 * time.Second)
	old2 := secretEntry("old", "2")
	a.onObjectIndex(nil, h.index(3, db, tls, old2))
	if rv := getRV(a, "old"); rv != "1" {
		t.Fatalf("old, version 2 on its way: %s", rv)
	}
	// Made again (another UID): pending, the old one is another object.
	clock.add(10 * time.Second)
	remade := old2
	remade.UID, remade.ResourceVersion = "uid-old-2", "3"
	a.onObjectIndex(nil, h.index(4, db, tls, remade))
	if err := getErr(a, "old"); !errors.Is(err, objects.ErrPending) {
		t.Fatalf("old made again, not received: %v", err)
	}
	// db is still pending since index 2, not since index 4.
	if err := getErr(a, "db"); !errors.As(err, &pe) || !pe.Since.Equal(time.Unix(1000, 0)) {
		t.Fatalf("db after more indexes: %v", err)
	}
	a.onObject(nil, h.object(tls, map[string][]byte{"k": []byte("t")}))
	if rv := getRV(a, "tls"); rv != "1" {
		t.Fatalf("tls received: %s", rv)
	}

	// Not yet overdue at the bound minus a tick; db at the bound.
	a.objs.mu.Lock()
	refs, next := a.objs.set.overdueAt(time.Unix(1000, 0).Add(ObjectPendingMax - time.Nanosecond))
	a.objs.mu.Unlock()
	if len(refs) != 0 || !next.Equal(time.Unix(1000, 0).Add(ObjectPendingMax)) {
		t.Fatalf("before the bound: %v, next %v", refs, next)
	}
	clock.t = time.Unix(1000, 0).Add(ObjectPendingMax)
	if err := getErr(a, "db"); !errors.Is(err, objects.ErrNotFound) || err.Error() != `secret "db" not found` {
		t.Fatalf("db past the bound: %v", err)
	}
	if err := getErr(a, "old"); !errors.Is(err, objects.ErrPending) {
		t.Fatalf("old (pending 20 s less): %v", err)
	}
	a.objs.mu.Lock()
	refs, next = a.objs.set.overdueAt(clock.t)
	again, _ := a.objs.set.overdueAt(clock.t.Add(time.Second))
	a.objs.mu.Unlock()
	if !slices.Equal(refs, []objects.Ref{secretRef("db")}) || !next.Equal(clock.t.Add(20*time.Second)) || len(again) != 0 {
		t.Fatalf("overdue %v next %v, then %v", refs, next, again)
	}
	// Past its bound, the object made again: the version held before.
	clock.add(20 * time.Second)
	if rv := getRV(a, "old"); rv != "1" {
		t.Fatalf("old past the bound: %s", rv)
	}
	// It arrives at last: found, no longer pending or overdue.
	a.onObject(nil, h.object(db, map[string][]byte{"k": []byte("d")}))
	if rv := getRV(a, "db"); rv != "1" {
		t.Fatalf("db received late: %s", rv)
	}
	// Dropped from the index and listed again: pending anew, from then.
	a.onObjectIndex(nil, h.index(5, tls))
	clock.add(time.Second)
	a.onObjectIndex(nil, h.index(6, tls, secretEntry("new", "1")))
	if err := getErr(a, "new"); !errors.As(err, &pe) || !pe.Since.Equal(clock.t) {
		t.Fatalf("new: %v", err)
	}
	if err := getErr(a, "old"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("old dropped: %v", err)
	}
}

// An object refused for the device's bound on bytes is not pending: it
// will not come until another index.
func TestGetterRefusedIsNotPending(t *testing.T) {
	h := newObjHub(t)
	a, _ := objAgent(t, t.TempDir(), h, func(c *Config) { c.MaxObjectBytes = 8 })
	big := secretEntry("big", "1")
	a.onObjectIndex(nil, h.index(1, big))
	if err := getErr(a, "big"); !errors.Is(err, objects.ErrPending) {
		t.Fatalf("big before it comes: %v", err)
	}
	a.onObject(nil, h.object(big, map[string][]byte{"key": []byte("0123456789")}))
	if err := getErr(a, "big"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("big refused: %v", err)
	}
}

// The entries pending too long are told to the daemon as overdue, then
// as changed (so the containers waiting for them go on), by the request
// loop, with no connection, from the objects loaded from state.db too.
func TestOverdueToldWithoutAConnection(t *testing.T) {
	h := newObjHub(t)
	dir := t.TempDir()
	a, _ := objAgent(t, dir, h, nil)
	a.onObjectIndex(nil, h.index(1, secretEntry("db", "1")))
	a.store.Close()

	type call struct {
		overdue bool
		refs    []objects.Ref
	}
	calls := make(chan call, 4)
	clock := make(chan time.Time, 1)
	start := time.Unix(5000, 0)
	clock <- start
	now := func() time.Time { t := <-clock; clock <- t; return t }
	b, _ := objAgent(t, dir, h, func(c *Config) {
		c.OnObjectsChanged = func(r []objects.Ref) { calls <- call{false, r} }
		c.OnObjectsOverdue = func(r []objects.Ref) { calls <- call{true, r} }
	})
	b.now = now
	// The index was loaded in New, with the real clock: load it again on
	// the test's.
	b.objs.set = newObjectSet(0, 0)
	b.loadObjects()
	if err := getErr(b, "db"); !errors.Is(err, objects.ErrPending) {
		t.Fatalf("db loaded from state.db, never received: %v", err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { b.objectRequests(stop); close(done) }()
	go func() { b.handChanges(stop) }()
	defer func() { close(stop); <-done }()
	<-clock
	clock <- start.Add(ObjectPendingMax)
	poke(b.objs.wake) // as the timer would, at the bound
	want := []objects.Ref{secretRef("db")}
	for i, overdue := range []bool{true, false} {
		select {
		case c := <-calls:
			if c.overdue != overdue || !slices.Equal(c.refs, want) {
				t.Fatalf("call %d: overdue %v %v", i, c.overdue, c.refs)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("waited 10 s for call %d (overdue %v) of the daemon's hooks", i, overdue)
		}
	}
	if err := getErr(b, "db"); !errors.Is(err, objects.ErrNotFound) {
		t.Fatalf("db overdue: %v", err)
	}
}
