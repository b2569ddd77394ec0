package replica_test

import (
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openStore opens the fleet store of the test (both kinds: EachStore)
// and gives its replicas' tables.
func openStore(t *testing.T) (*fleetdb.Fleet, *replica.Store) {
	t.Helper()
	return openStoreAt(t, pgtest.Store(t))
}

func openStoreAt(t *testing.T, store string) (*fleetdb.Fleet, *replica.Store) {
	t.Helper()
	f, err := fleetdb.OpenStore(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f, replica.NewStore(f.SQL())
}

// self is replica id's process in these tests: one per ID.
func self(id string) replica.Self { return replica.Self{ID: id, Nonce: "nonce-" + id} }

// round is one attempt of the elector's, by hand.
func round(t *testing.T, s *replica.Store, me string, ttl time.Duration) (replica.Decision, bool) {
	t.Helper()
	l, now, err := s.ReadLease(replica.LeaderLease)
	if err != nil {
		t.Fatal(err)
	}
	d := replica.Decide(self(me), l, now, replica.Timing{TTL: ttl, Renew: ttl / 3, Margin: 0})
	ok, err := s.WriteLease(replica.LeaderLease, self(me), l, d, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return d, ok
}

func TestLeaseOnTheStore(t *testing.T) { pgtest.EachStore(t, testLeaseOnTheStore) }

func testLeaseOnTheStore(t *testing.T) {
	f, s := openStore(t)
	if d, ok := round(t, s, "a", time.Minute); d.Action != replica.Create || !ok {
		t.Fatalf("first round: %v written=%v, want a written create", d, ok)
	}
	if d, ok := round(t, s, "a", time.Minute); d.Action != replica.Renew || !ok || d.Token != 1 {
		t.Fatalf("renewal: %+v written=%v, want a written renewal of token 1", d, ok)
	}
	if d, ok := round(t, s, "b", time.Minute); d.Action != replica.Wait || ok {
		t.Fatalf("b while a holds: %+v written=%v, want wait", d, ok)
	}
	// A stale read loses the compare-and-set.
	stale, _, err := s.ReadLease(replica.LeaderLease)
	if err != nil {
		t.Fatal(err)
	}
	round(t, s, "a", -time.Minute) // renewed, already expired on the database's clock
	if ok, err := s.WriteLease(replica.LeaderLease, self("b"), stale, replica.Decision{Action: replica.Take, Token: 2}, time.Minute); err != nil || ok {
		t.Fatalf("a take on a stale read: written=%v err=%v, want not written", ok, err)
	}
	// The expired lease is b's, with the next token; a's write is fenced.
	d, ok := round(t, s, "b", time.Minute)
	if d.Action != replica.Take || !ok || d.Token != 2 {
		t.Fatalf("b after a's expiry: %+v written=%v, want a written take of token 2", d, ok)
	}
	fence := func(me string, token int64) error {
		tx, err := f.SQL().Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		return s.Fence(tx, replica.LeaderLease, self(me), token)
	}
	if err := fence("a", 1); !errors.Is(err, replica.ErrDeposed) {
		t.Fatalf("a's write with token 1 after b took the lease: %v, want ErrDeposed", err)
	}
	if err := fence("b", 2); err != nil {
		t.Fatalf("b's own write: %v", err)
	}
	// Released, it is a's at once with token 3.
	if ok, err := s.Release(replica.LeaderLease, self("b"), 2); err != nil || !ok {
		t.Fatalf("release: %v %v", ok, err)
	}
	if d, ok := round(t, s, "a", time.Minute); d.Action != replica.Take || !ok || d.Token != 3 {
		t.Fatalf("a after b's release: %+v written=%v, want a written take of token 3", d, ok)
	}
	if ok, err := s.Release(replica.LeaderLease, self("b"), 2); err != nil || ok {
		t.Fatalf("b's release of a lease it no longer holds: released=%v err=%v", ok, err)
	}
}

func TestMembersOnTheStore(t *testing.T) { pgtest.EachStore(t, testMembersOnTheStore) }

func testMembersOnTheStore(t *testing.T) {
	_, s := openStore(t)
	if err := s.Join(replica.Member{ID: "a", Nonce: self("a").Nonce, Address: "10.0.0.1:8443", Version: "v1"}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(replica.Member{ID: "b", Nonce: self("b").Nonce}, -time.Hour-time.Minute, nil); err != nil { // long dead
		t.Fatal(err)
	}
	members, now, err := s.Members()
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 2 || members[0].ID != "a" || members[0].Address != "10.0.0.1:8443" || members[0].Version != "v1" {
		t.Fatalf("members: %+v", members)
	}
	if !members[0].Live(now) || members[1].Live(now) || replica.OthersLive("b", members, now) != 1 {
		t.Fatalf("liveness at %d: %+v", now, members)
	}
	if ok, err := s.Heartbeat(self("a"), time.Minute); err != nil || !ok {
		t.Fatalf("heartbeat: %v %v", ok, err)
	}
	if ok, err := s.Heartbeat(self("nobody"), time.Minute); err != nil || ok {
		t.Fatalf("heartbeat of an unknown replica: %v %v, want false", ok, err)
	}
	if err := s.Prune(time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := s.Leave(self("a")); err != nil {
		t.Fatal(err)
	}
	if members, _, _ := s.Members(); len(members) != 0 {
		t.Fatalf("after prune and leave: %+v", members)
	}
}

// fastTiming keeps the elector tests short, and still lets a loaded
// 2-core machine run them: each store statement may take up to Renew
// (the store's timeout), and a leader has a TTL of failed rounds
// before its term lapses.
var fastTiming = replica.Timing{TTL: 3 * time.Second, Renew: time.Second, Margin: 500 * time.Millisecond}

func newElector(t *testing.T, s *replica.Store, id string) (*replica.Elector, chan bool) {
	t.Helper()
	e, err := replica.New(s, replica.Config{ID: id, Timing: fastTiming, Poll: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	changes := make(chan bool, 16)
	e.Watch(func(leading bool) { changes <- leading })
	return e, changes
}

func waitLeading(t *testing.T, changes chan bool, want bool, within time.Duration, what string) time.Duration {
	t.Helper()
	start := time.Now()
	timeout := time.After(within)
	for {
		select {
		case got := <-changes:
			if got == want {
				return time.Since(start)
			}
		case <-timeout:
			t.Fatalf("%s: no change to leading=%v within %v", what, want, within)
		}
	}
}

// Two replicas on PostgreSQL (two pools, as two processes): one leads;
// stopped, it hands over at once; on SQLite a second replica is refused.
func TestElectors(t *testing.T) { pgtest.EachStore(t, testElectors) }

func testElectors(t *testing.T) {
	store := pgtest.Store(t)
	fa, sa := openStoreAt(t, store)
	a, aChanges := newElector(t, sa, "a")
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	waitLeading(t, aChanges, true, 5*time.Second, "a, the first replica")
	if !a.Leading() || a.Token() != 1 {
		t.Fatalf("a: leading=%v token=%d", a.Leading(), a.Token())
	}
	_, sb := openStoreAt(t, store)
	b, bChanges := newElector(t, sb, "b")
	if fa.Dialect() == sqldb.SQLite {
		err := b.Start()
		if err == nil || !strings.Contains(err.Error(), "another podhub") {
			b.Stop()
			t.Fatalf("a second replica on SQLite: %v, want refused", err)
		}
		return
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	if b.OthersAtStart() != 1 {
		t.Fatalf("b saw %d other replicas at start, want 1", b.OthersAtStart())
	}
	// b does not lead while a renews (a few TTLs' worth of rounds).
	select {
	case l := <-aChanges:
		t.Fatalf("a's own term changed to leading=%v while b waited: its renewals failed for a TTL (statements over %v)", l, fastTiming.Renew)
	case <-bChanges:
		t.Fatal("b leads while a renews")
	case <-time.After(2 * fastTiming.TTL):
	}
	if !a.Leading() || b.Leading() {
		t.Fatalf("a leading=%v, b leading=%v", a.Leading(), b.Leading())
	}
	start := time.Now()
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	waitLeading(t, bChanges, true, 5*time.Second, "b after a's stop")
	t.Logf("hand-off after a graceful stop: %v (poll %v)", time.Since(start).Round(time.Millisecond), 100*time.Millisecond)
	if b.Token() != 2 {
		t.Fatalf("b's token %d, want 2", b.Token())
	}
}

// A deposed leader's scheduling pass is refused in its own transaction
// (workloaddb's StorePods fenced by the elector), and the leader learns
// at its next renewal that it no longer leads. PostgreSQL only: on
// SQLite one replica leads until it stops, so nothing deposes it.
func TestDeposedLeadersPassIsFenced(t *testing.T) {
	store := pgtest.URL(t)
	fa, sa := openStoreAt(t, store)
	a, aChanges := newElector(t, sa, "a")
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	waitLeading(t, aChanges, true, 5*time.Second, "a, the first replica")
	ws := workloaddb.New(fa.SQL())
	ws.SetFence(a.Fence)
	if err := ws.StorePods(workloaddb.PodWrites{}, time.Now()); err != nil {
		t.Fatalf("the leader's pass: %v", err)
	}
	// b takes the lease by force (as it would past a's expiry). The
	// take is a compare-and-set on what b read, so a renewal of a's
	// between b's read and b's write makes it lose; b reads again.
	_, sb := openStoreAt(t, store)
	deadline := time.Now().Add(5 * time.Second)
	for {
		l, _, err := sb.ReadLease(replica.LeaderLease)
		if err != nil {
			t.Fatal(err)
		}
		ok, err := sb.WriteLease(replica.LeaderLease, self("b"), l, replica.Decision{Action: replica.Take, Token: l.Token + 1}, time.Minute)
		if err != nil {
			t.Fatalf("b's take: %v", err)
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("b's take lost every compare-and-set to a's renewals for 5s")
		}
	}
	if err := ws.StorePods(workloaddb.PodWrites{}, time.Now()); !errors.Is(err, replica.ErrDeposed) {
		t.Fatalf("the deposed leader's pass: %v, want ErrDeposed", err)
	}
	if err := ws.Forget([]types.NamespacedName{{Namespace: "default", Name: "web-1"}}); !errors.Is(err, replica.ErrDeposed) {
		t.Fatalf("the deposed leader's forgetting of stopped pods: %v, want ErrDeposed", err)
	}
	waitLeading(t, aChanges, false, 5*time.Second, "a after b took the lease")
}

// A leader cut off from the store stops leading on its own clock when
// its TTL runs out, before another replica takes the lease (past the
// expiry and the margin on the database's clock). PostgreSQL only: on
// SQLite one replica leads until it stops.
func TestLeaderCutOffStopsBeforeTheTakeover(t *testing.T) {
	store := pgtest.URL(t)
	fa, sa := openStoreAt(t, store)
	a, aChanges := newElector(t, sa, "a")
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	waitLeading(t, aChanges, true, 5*time.Second, "a, the first replica")
	_, sb := openStoreAt(t, store)
	b, bChanges := newElector(t, sb, "b")
	// At the moment b leads, a must not (on its own clock).
	var bothLed atomic.Bool
	b.Watch(func(leading bool) {
		if leading && a.Leading() {
			bothLed.Store(true)
		}
		bChanges <- leading
	})
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	cut := time.Now()
	fa.Close() // a's store is gone: every renewal fails
	stopped := waitLeading(t, aChanges, false, 10*time.Second, "a after losing its store")
	if a.Leading() {
		t.Fatal("a leads after telling it stopped")
	}
	waitLeading(t, bChanges, true, 10*time.Second, "b taking the lapsed lease")
	took := time.Since(cut)
	t.Logf("a stopped %v after its store was cut, b took over %v after (TTL %v, margin %v)",
		stopped.Round(time.Millisecond), took.Round(time.Millisecond), fastTiming.TTL, fastTiming.Margin)
	if bothLed.Load() {
		t.Error("a still led when b took the lease")
	}
	if stopped > fastTiming.TTL+fastTiming.Renew {
		t.Errorf("a stopped %v after the cut, later than its TTL and a round (%v)", stopped, fastTiming.TTL+fastTiming.Renew)
	}
	if b.Token() != a.Token()+1 {
		t.Errorf("b's token %d, a's %d: want one more", b.Token(), a.Token())
	}
}

// Two processes given one replica ID (a shared podhub.yaml, a cloned
// data directory): the second's Start is refused while the first lives,
// and on the store neither's row nor lease is the other's.
func TestOneIDTwoProcesses(t *testing.T) { pgtest.EachStore(t, testOneIDTwoProcesses) }

func testOneIDTwoProcesses(t *testing.T) {
	store := pgtest.Store(t)
	_, sa := openStoreAt(t, store)
	a, aChanges := newElector(t, sa, "hub")
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	defer a.Stop()
	waitLeading(t, aChanges, true, 5*time.Second, "the first process with ID hub")
	_, sb := openStoreAt(t, store)
	b, _ := newElector(t, sb, "hub")
	if err := b.Start(); !errors.Is(err, replica.ErrIDInUse) || !strings.Contains(err.Error(), "own replica ID") {
		b.Stop()
		t.Fatalf("a second process with the leader's replica ID: %v, want refused (ErrIDInUse)", err)
	}
	if !a.Leading() {
		t.Fatal("the first process stopped leading when the second was refused")
	}
}

// The store's statements tell two processes of one ID apart by nonce.
func TestOneIDTwoNoncesOnTheStore(t *testing.T) { pgtest.EachStore(t, testOneIDTwoNoncesOnTheStore) }

func testOneIDTwoNoncesOnTheStore(t *testing.T) {
	f, s := openStore(t)
	first, second := replica.Self{ID: "hub", Nonce: "1111"}, replica.Self{ID: "hub", Nonce: "2222"}
	if err := s.Join(replica.Member{ID: "hub", Nonce: first.Nonce}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(replica.Member{ID: "hub", Nonce: second.Nonce}, time.Minute, nil); !errors.Is(err, replica.ErrIDInUse) {
		t.Fatalf("joining beside a live process of the same ID: %v, want ErrIDInUse", err)
	}
	if ok, err := s.Heartbeat(second, time.Minute); err != nil || ok {
		t.Fatalf("the second process's heartbeat on the first's row: %v %v, want false", ok, err)
	}
	if err := s.Leave(second); err != nil {
		t.Fatal(err)
	}
	if members, _, err := s.Members(); err != nil || len(members) != 1 || members[0].Nonce != first.Nonce {
		t.Fatalf("after the second process's leave: %+v %v, want the first's row kept", members, err)
	}
	// The first's lease: the second waits, and its writes are fenced.
	timing := replica.Timing{TTL: time.Minute, Renew: 20 * time.Second}
	l, now, err := s.ReadLease(replica.LeaderLease)
	if err != nil {
		t.Fatal(err)
	}
	d := replica.Decide(first, l, now, timing)
	if ok, err := s.WriteLease(replica.LeaderLease, first, l, d, time.Minute); err != nil || !ok {
		t.Fatalf("the first's create: %v %v", ok, err)
	}
	if l, now, err = s.ReadLease(replica.LeaderLease); err != nil || l.Nonce != first.Nonce {
		t.Fatalf("the lease: %+v %v, want the first's nonce", l, err)
	}
	if d := replica.Decide(second, l, now, timing); d.Action != replica.Wait {
		t.Fatalf("the second process on the first's lease: %v, want wait", d.Action)
	}
	fence := func(me replica.Self) error {
		tx, err := f.SQL().Begin()
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		return s.Fence(tx, replica.LeaderLease, me, l.Token)
	}
	if err := fence(second); !errors.Is(err, replica.ErrDeposed) {
		t.Fatalf("the second process's write with the first's token: %v, want ErrDeposed", err)
	}
	if err := fence(first); err != nil {
		t.Fatalf("the holder's own write: %v", err)
	}
	if ok, err := s.Release(replica.LeaderLease, second, l.Token); err != nil || ok {
		t.Fatalf("the second process released the first's lease: %v %v", ok, err)
	}
	// A stale row (as read, unchanged since) is replaced; one that moved
	// is not.
	members, _, err := s.Members()
	if err != nil {
		t.Fatal(err)
	}
	moved := members[0]
	moved.Heartbeat--
	if err := s.Join(replica.Member{ID: "hub", Nonce: second.Nonce}, time.Minute, &moved); !errors.Is(err, replica.ErrIDInUse) {
		t.Fatalf("replacing a row that heartbeated since it was read: %v, want ErrIDInUse", err)
	}
	if err := s.Join(replica.Member{ID: "hub", Nonce: second.Nonce}, time.Minute, &members[0]); err != nil {
		t.Fatalf("replacing the row read as silent: %v", err)
	}
	// Once a process's row is dead (expired), another may join.
	if err := s.Join(replica.Member{ID: "hub", Nonce: second.Nonce}, -time.Second, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Join(replica.Member{ID: "hub", Nonce: first.Nonce}, time.Minute, nil); err != nil {
		t.Fatalf("joining after the other process's row expired: %v", err)
	}
}

// A podhub killed and restarted at once finds its old process's row
// live but silent: it takes it over once silent past its round period
// and the margin, and leads.
func TestRestartAfterAKillTakesTheSilentRowOver(t *testing.T) {
	pgtest.EachStore(t, testRestartAfterAKillTakesTheSilentRowOver)
}

func testRestartAfterAKillTakesTheSilentRowOver(t *testing.T) {
	_, s := openStore(t)
	if err := s.Join(replica.Member{ID: "hub", Nonce: "killed"}, time.Minute, nil); err != nil {
		t.Fatal(err)
	}
	e, changes := newElector(t, s, "hub")
	start := time.Now()
	if err := e.Start(); err != nil {
		t.Fatalf("restarted beside its killed process's silent row: %v", err)
	}
	defer e.Stop()
	waitLeading(t, changes, true, 5*time.Second, "the restarted process")
	t.Logf("started after %v (period %v + margin %v)", time.Since(start).Round(time.Millisecond), fastTiming.Renew, fastTiming.Margin)
}

// A process restarted on its data directory after a kill -9 knows its
// dead predecessor's nonce (cmd/podhub keeps it there under a lock) and
// takes its live-looking row over at once, instead of watching it stay
// silent for a renewal period and the margin.
func TestPredecessorsRowTakenOverAtOnce(t *testing.T) {
	pgtest.EachStore(t, testPredecessorsRowTakenOverAtOnce)
}

func testPredecessorsRowTakenOverAtOnce(t *testing.T) {
	_, s := openStore(t)
	slow := replica.Timing{TTL: time.Minute, Renew: 20 * time.Second, Margin: 8 * time.Second}
	if err := s.Join(replica.Member{ID: "hub", Nonce: "dead"}, slow.TTL, nil); err != nil {
		t.Fatal(err)
	}
	e, err := replica.New(s, replica.Config{ID: "hub", Timing: slow, Poll: 100 * time.Millisecond, Predecessor: "dead"})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := e.Start(); err != nil {
		t.Fatalf("restarted over its predecessor's row: %v", err)
	}
	defer e.Stop()
	// Without the predecessor's nonce Start would watch the row for
	// 28 s (the renewal period and the margin) before taking it.
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Start took %v over a dead predecessor's row", took)
	}
	members, _, err := s.Members()
	if err != nil || len(members) != 1 || members[0].Nonce != e.Nonce() {
		t.Fatalf("members %+v %v: want only the new process's row", members, err)
	}
}
