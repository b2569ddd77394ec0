package replica_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/test/pgtest"
)

// The device_owners table's guarded writes, on both stores.
func TestOwnersOnTheStore(t *testing.T) { pgtest.EachStore(t, testOwnersOnTheStore) }

func testOwnersOnTheStore(t *testing.T) {
	_, s := openStore(t)
	a, b := self("a"), self("b")
	if err := s.Join(replica.Member{ID: "a", Nonce: a.Nonce}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(replica.Member{ID: "b", Nonce: b.Nonce}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	owners, _, err := s.Owners()
	if err != nil || len(owners) != 0 {
		t.Fatalf("owners at first: %v %v", owners, err)
	}
	taken, err := s.TakeBuckets(a, []int{0, 1, 2, 1023}, owners, 0)
	if err != nil || !slices.Equal(taken, []int{0, 1, 2, 1023}) {
		t.Fatalf("a's take of free buckets: %v %v", taken, err)
	}
	// b decided on the same (stale) read: the rows exist now.
	if taken, err := s.TakeBuckets(b, []int{0, 1}, owners, 0); err != nil || len(taken) != 0 {
		t.Fatalf("b's take on a stale read: %v %v, want none", taken, err)
	}
	// On a fresh read, a is alive: the guard refuses.
	owners, _, _ = s.Owners()
	if taken, err := s.TakeBuckets(b, []int{0, 1}, owners, 0); err != nil || len(taken) != 0 {
		t.Fatalf("b's take of a live holder's buckets: %v %v, want none", taken, err)
	}
	// a releases 1023; another's release of 0 does nothing.
	if err := s.ReleaseBuckets(a, []int{1023}); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseBuckets(b, []int{0}); err != nil {
		t.Fatal(err)
	}
	owners, _, _ = s.Owners()
	if len(owners) != 3 || owners[0].Holder != "a" {
		t.Fatalf("after the releases: %+v", owners)
	}
	// a's row expires: b takes after the margin.
	if err := s.Join(replica.Member{ID: "a", Nonce: a.Nonce}, -time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if taken, err := s.TakeBuckets(b, []int{0}, owners, time.Hour); err != nil || len(taken) != 0 {
		t.Fatalf("b's take within the margin: %v %v, want none", taken, err)
	}
	// a reclaims after its lapse (its row renewed): since moves, so b's
	// take on the older read fails.
	if err := s.Join(replica.Member{ID: "a", Nonce: a.Nonce}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	got, err := s.Reclaim(a)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []int{0, 1, 2}) {
		t.Fatalf("reclaim: %v %v", got, err)
	}
	if err := s.Join(replica.Member{ID: "a", Nonce: a.Nonce}, -time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if taken, err := s.TakeBuckets(b, []int{0}, owners, 0); err != nil || len(taken) != 0 {
		t.Fatalf("b's take on a read older than a's reclaim: %v %v, want none", taken, err)
	}
	owners, _, _ = s.Owners()
	time.Sleep(5 * time.Millisecond) // past the expiry by more than the 0 margin, on the database's clock
	if taken, err := s.TakeBuckets(b, []int{0, 1}, owners, 0); err != nil || !slices.Equal(taken, []int{0, 1}) {
		t.Fatalf("b's take of an expired holder's buckets: %v %v", taken, err)
	}
	if err := s.Join(replica.Member{ID: "a", Nonce: a.Nonce}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Reclaim(a); err != nil || !slices.Equal(got, []int{2}) {
		t.Fatalf("a's reclaim after b's take: %v %v, want [2]", got, err)
	}
	l, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	// A device in each of buckets 0, 1 and 2, and one in 3 (nobody's).
	l.CountDevices([]string{inBucket(0), inBucket(1), inBucket(2), inBucket(3)})
	for _, r := range l.Replicas {
		want, devices := map[string]int{"a": 1, "b": 2}[r.ID], map[string]int{"a": 1, "b": 2}[r.ID]
		if s.Dialect() == sqldb.SQLite {
			// The lone replica (the first live row) owns all, no table use.
			want, devices = map[string]int{"a": 1024}[r.ID], map[string]int{"a": 4}[r.ID]
		}
		if r.Buckets != want || r.Devices != devices {
			t.Fatalf("List: %s holds %d buckets and %d devices, want %d and %d", r.ID, r.Buckets, r.Devices, want, devices)
		}
	}
	if err := s.ReleaseAll(b); err != nil {
		t.Fatal(err)
	}
	if owners, _, _ := s.Owners(); len(owners) != 1 {
		t.Fatalf("after b's ReleaseAll: %+v", owners)
	}
}

// Two electors on one PostgreSQL (two pools, as two processes): the
// first owns everything at Start, the second gets half within a few
// rounds with never a bucket owned by both, and a Stop hands its half
// over at the other's next round.
func TestElectorsShareDevices(t *testing.T) {
	store := pgtest.URL(t)
	_, sa := openStoreAt(t, store)
	a, _ := newElector(t, sa, "a")
	var mu sync.Mutex
	gained := map[string]int{}
	a.WatchOwners(func(g, l []int) { mu.Lock(); gained["a"] += len(g) - len(l); mu.Unlock() })
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	if n := a.Ownership().Count(); n != replica.Buckets {
		t.Fatalf("a owns %d buckets after Start, want all", n)
	}
	_, sb := openStoreAt(t, store)
	b, _ := newElector(t, sb, "b")
	b.WatchOwners(func(g, l []int) { mu.Lock(); gained["b"] += len(g) - len(l); mu.Unlock() })
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			b.Stop()
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for {
		oa, ob := a.Ownership(), b.Ownership()
		for x := range replica.Buckets {
			now := time.Now()
			if oa.Has(x) && ob.Has(x) && now.Before(oa.Until) && now.Before(ob.Until) {
				t.Fatalf("bucket %d owned by both", x)
			}
		}
		// The ownership is stored before the watchers are told (a's of
		// its loss, b's of its gain): wait for both.
		mu.Lock()
		told := map[string]int{"a": gained["a"], "b": gained["b"]}
		mu.Unlock()
		if oa.Count() == replica.Buckets/2 && ob.Count() == replica.Buckets/2 && told["a"] == replica.Buckets/2 && told["b"] == replica.Buckets/2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a %d, b %d buckets after 10s, watchers told %v: want 512 each", oa.Count(), ob.Count(), told)
		}
		time.Sleep(20 * time.Millisecond)
	}
	start := time.Now()
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	for a.Ownership().Count() != replica.Buckets {
		if time.Since(start) > 5*time.Second {
			t.Fatalf("a owns %d buckets 5s after b's stop", a.Ownership().Count())
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("b's buckets handed over to a in %v", time.Since(start))
}

// inBucket is a device ID in bucket b.
func inBucket(b int) string {
	for i := 0; ; i++ {
		if id := fmt.Sprintf("dev-%d", i); replica.Bucket(id) == b {
			return id
		}
	}
}

// The elector renews over a pool of its own (podhub serve's
// electorStore): with every connection of the fleet's pool taken by
// writers (one holding the writer lock, seven waiting for it), a
// heartbeat over the fleet's pool waits, one over its own does not.
func TestRenewalsNeverWaitBehindWriters(t *testing.T) {
	store := pgtest.URL(t)
	f, shared := openStoreAt(t, store)
	me := self("a")
	if err := shared.Join(replica.Member{ID: "a", Nonce: me.Nonce}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	own, err := postgres.Open(store)
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	own.SetMaxOpenConns(2)
	elector := replica.NewStore(&sqldb.DB{DB: own, Dialect: sqldb.Postgres})

	holder, err := f.SQL().Begin() // takes the writer lock
	if err != nil {
		t.Fatal(err)
	}
	var waiting sync.WaitGroup
	for range postgres.MaxConns - 1 {
		waiting.Go(func() {
			if tx, err := f.SQL().Begin(); err == nil { // waits for the lock
				tx.Rollback()
			}
		})
	}
	defer waiting.Wait()
	defer holder.Rollback()
	deadline := time.Now().Add(10 * time.Second)
	for f.SQL().Stats().InUse < postgres.MaxConns {
		if time.Now().After(deadline) {
			t.Fatalf("the fleet's pool: %d connections in use within 10s, want %d", f.SQL().Stats().InUse, postgres.MaxConns)
		}
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	if ok, err := elector.Heartbeat(me, time.Minute); err != nil || !ok {
		t.Fatalf("a heartbeat over the elector's own pool: %v %v", ok, err)
	}
	t.Logf("a heartbeat over the elector's own pool, every writer connection taken: %v", time.Since(start).Round(time.Millisecond))
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("a heartbeat over the elector's own pool took %v", d)
	}
	shared.SetTimeout(300 * time.Millisecond)
	if _, err := shared.Heartbeat(me, time.Minute); err == nil {
		t.Fatal("a heartbeat over the fleet's exhausted pool went through: the test does not hold its connections")
	}
}
