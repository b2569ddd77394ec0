package replica

import (
	"testing"
	"time"
)

// fleetWorld is a fake store of members' and owners' rows and the two
// clocks (the database's in ms, the replicas' monotonic one), moved by
// the test only: one round of a replica is what Elector.ownersRound
// does, the writes guarded as store.go's SQL guards them.
type fleetWorld struct {
	t       *testing.T
	timing  Timing
	dbNow   int64
	local   time.Time
	members map[string]*Member // by ID
	owners  map[int]Owner
	own     map[Self]*Ownership
}

func newFleetWorld(t *testing.T) *fleetWorld {
	return &fleetWorld{t: t, timing: DefaultTiming, dbNow: 1_700_000_000_000, local: time.Unix(1000, 0),
		members: map[string]*Member{}, owners: map[int]Owner{}, own: map[Self]*Ownership{}}
}

func (w *fleetWorld) advance(d time.Duration) {
	w.dbNow += d.Milliseconds()
	w.local = w.local.Add(d)
}

func (w *fleetWorld) rows() ([]Member, []Owner) {
	var ms []Member
	for _, m := range w.members {
		ms = append(ms, *m)
	}
	var os []Owner
	for b := range Buckets {
		if o, ok := w.owners[b]; ok {
			os = append(os, o)
		}
	}
	return ms, os
}

// round is one elector round of process me: heartbeat (joining), then
// the owners' rebalance.
func (w *fleetWorld) round(me Self) {
	sent := w.local
	m := w.members[me.ID]
	if m == nil || m.Nonce != me.Nonce {
		w.members[me.ID] = &Member{ID: me.ID, Nonce: me.Nonce, Started: w.dbNow}
		m = w.members[me.ID]
	}
	m.Heartbeat, m.Expires = w.dbNow, w.dbNow+w.timing.TTL.Milliseconds()
	cur := w.own[me]
	until := sent.Add(w.timing.TTL)
	if cur == nil || !sent.Before(cur.Until) {
		for b, o := range w.owners { // Reclaim
			if o.heldBy(me) {
				o.Since = w.dbNow
				w.owners[b] = o
			}
		}
	}
	members, owners := w.rows()
	var held []int
	for _, o := range owners {
		if o.heldBy(me) {
			held = append(held, o.Bucket)
		}
	}
	take, release := Rebalance(me, members, owners, w.dbNow, w.timing)
	next := new(Ownership).With(held, true, until).With(release, false, until)
	w.own[me] = next
	for _, b := range release {
		if w.owners[b].heldBy(me) {
			delete(w.owners, b)
		}
	}
	for _, b := range take {
		o, ok := w.owners[b]
		if ok {
			h := w.members[o.Holder]
			if h != nil && h.Nonce == o.Nonce && h.Expires+w.timing.Margin.Milliseconds() >= w.dbNow {
				continue // the guard: its holder is alive
			}
		}
		w.owners[b] = Owner{Bucket: b, Holder: me.ID, Nonce: me.Nonce, Since: w.dbNow}
		next = next.With([]int{b}, true, until)
	}
	w.own[me] = next
	w.check()
}

// check: no bucket is handled by two replicas at once (valid ownership
// on their clocks).
func (w *fleetWorld) check() {
	w.t.Helper()
	for b := range Buckets {
		var holders []Self
		for s, o := range w.own {
			if o.Has(b) && w.local.Before(o.Until) {
				holders = append(holders, s)
			}
		}
		if len(holders) > 1 {
			w.t.Fatalf("bucket %d handled by %v at once", b, holders)
		}
	}
}

func (w *fleetWorld) count(me Self) int {
	o := w.own[me]
	if o == nil || !w.local.Before(o.Until) {
		return 0
	}
	return o.Count()
}

func TestBucket(t *testing.T) {
	// FNV-1a 32 of "a" is 0xe40c292c; mod 1024 = 0x12c.
	if got := Bucket("a"); got != 0x12c {
		t.Fatalf("Bucket(a) = %d, want %d", got, 0x12c)
	}
	for _, id := range []string{"", "dev-1", "a-very-long-device-name.example"} {
		if b := Bucket(id); b < 0 || b >= Buckets {
			t.Fatalf("Bucket(%q) = %d, out of range", id, b)
		}
	}
}

func TestLoneReplicaOwnsAll(t *testing.T) {
	w := newFleetWorld(t)
	a := self("a")
	w.round(a)
	if n := w.count(a); n != Buckets {
		t.Fatalf("a lone replica holds %d buckets, want %d", n, Buckets)
	}
	if !w.own[a].Owns("any-device", w.local) {
		t.Fatal("a lone replica does not own a device")
	}
}

func TestSecondReplicaSharesAfterTwoRounds(t *testing.T) {
	w := newFleetWorld(t)
	a, b := self("a"), self("b")
	w.round(a)
	w.round(b) // joins: nothing free yet
	if n := w.count(b); n != 0 {
		t.Fatalf("b took %d buckets a holds while alive", n)
	}
	w.advance(time.Second)
	w.round(a) // releases its extras
	if n := w.count(a); n != Buckets/2 {
		t.Fatalf("a holds %d after its round, want %d", n, Buckets/2)
	}
	w.round(b)
	if w.count(a) != Buckets/2 || w.count(b) != Buckets/2 {
		t.Fatalf("a %d, b %d: want 512 each", w.count(a), w.count(b))
	}
	// a released the highest buckets.
	if !w.own[a].Has(0) || w.own[a].Has(Buckets-1) {
		t.Fatal("a kept the wrong half: want the lowest buckets")
	}
	// A third: ceil(1024/3) = 342 each at most, every bucket held.
	c := self("c")
	for range 3 {
		w.advance(time.Second)
		w.round(a)
		w.round(b)
		w.round(c)
	}
	total := w.count(a) + w.count(b) + w.count(c)
	if total != Buckets || w.count(a) > 342 || w.count(b) > 342 || w.count(c) > 342 {
		t.Fatalf("three replicas: %d %d %d", w.count(a), w.count(b), w.count(c))
	}
}

func TestDeadHoldersBucketsTakenAfterExpiryAndMargin(t *testing.T) {
	w := newFleetWorld(t)
	a, b := self("a"), self("b")
	w.round(a)
	w.round(b)
	w.round(a)
	w.round(b)
	// a dies (no more rounds). b polls every second.
	var took time.Duration
	for d := time.Second; d <= w.timing.TTL+w.timing.Margin+2*time.Second; d += time.Second {
		w.advance(time.Second)
		w.round(b)
		if w.count(b) == Buckets {
			took = d
			break
		}
		if d <= w.timing.TTL+w.timing.Margin && w.count(b) != Buckets/2 {
			t.Fatalf("b took a's buckets %v after its last round, before its expiry and margin", d)
		}
	}
	if took == 0 {
		t.Fatal("b never took a's buckets")
	}
	if took > w.timing.TTL+w.timing.Margin+time.Second {
		t.Fatalf("b took a's buckets after %v, want within TTL+margin+a poll", took)
	}
}

func TestPausedReplicaStopsOwning(t *testing.T) {
	w := newFleetWorld(t)
	a, b := self("a"), self("b")
	w.round(a)
	w.round(b)
	w.round(a)
	w.round(b)
	// a pauses: its ownership runs out on its own clock at the TTL,
	// before b may take (check() asserts no overlap at every round).
	w.advance(w.timing.TTL - time.Millisecond)
	if !w.own[a].Owns(deviceIn(w.own[a]), w.local) {
		t.Fatal("a stopped owning before its term ran out")
	}
	w.advance(time.Millisecond)
	if w.own[a].Owns(deviceIn(w.own[a]), w.local) {
		t.Fatal("a paused past its term still owns")
	}
	w.advance(w.timing.Margin + time.Second)
	w.round(b)
	if w.count(b) != Buckets {
		t.Fatalf("b holds %d after a's expiry and margin", w.count(b))
	}
	// a resumes: its rows are gone; it takes its share back only as b
	// releases it.
	w.round(a)
	if w.count(a) != 0 {
		t.Fatalf("a resumed holding %d buckets b holds", w.count(a))
	}
	w.advance(time.Second)
	w.round(b)
	w.round(a)
	if w.count(a) != Buckets/2 || w.count(b) != Buckets/2 {
		t.Fatalf("after a resumed: a %d, b %d", w.count(a), w.count(b))
	}
}

func TestSameIDRestartTakesOldRowsAtOnce(t *testing.T) {
	w := newFleetWorld(t)
	old := Self{ID: "a", Nonce: "one"}
	w.round(old)
	delete(w.own, old) // killed
	w.advance(time.Second)
	restarted := Self{ID: "a", Nonce: "two"}
	w.round(restarted)
	if w.count(restarted) != Buckets {
		t.Fatalf("the restarted process holds %d, want all: the old process's rows are another nonce's", w.count(restarted))
	}
}

// deviceIn is a device whose bucket o holds.
func deviceIn(o *Ownership) string {
	for i := 0; ; i++ {
		d := "dev-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		if o.Has(Bucket(d)) {
			return d
		}
	}
}
