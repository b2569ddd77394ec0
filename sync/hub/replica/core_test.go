package replica

import (
	"testing"
	"time"
)

// world is a fake store and two clocks: the database's (ms) and the
// replicas' monotonic one, moved by the test only (nothing sleeps).
type world struct {
	t      *testing.T
	timing Timing
	dbNow  int64
	local  time.Time
	lease  *Lease
	terms  map[string]Term
}

func newWorld(t *testing.T) *world {
	return &world{t: t, timing: DefaultTiming, dbNow: 1_700_000_000_000, local: time.Unix(1000, 0), terms: map[string]Term{}}
}

// advance moves both clocks by d (the database's may run faster: skew).
func (w *world) advance(d time.Duration) {
	w.dbNow += d.Milliseconds()
	w.local = w.local.Add(d)
}

// round is one attempt of replica me, as the elector makes it, against
// the fake row (compare-and-set as store.go's SQL does).
func (w *world) round(me string) Decision {
	sent := w.local
	read := w.lease
	d := Decide(self(me), read, w.dbNow, w.timing)
	written := false
	switch d.Action {
	case Create:
		if w.lease == nil {
			w.lease = &Lease{Name: LeaderLease, Holder: me, Nonce: self(me).Nonce, Token: d.Token, Expires: w.dbNow + w.timing.TTL.Milliseconds()}
			written = true
		}
	case Renew, Take:
		if w.lease != nil && *w.lease == *read {
			w.lease = &Lease{Name: LeaderLease, Holder: me, Nonce: self(me).Nonce, Token: d.Token, Expires: w.dbNow + w.timing.TTL.Milliseconds()}
			written = true
		}
	}
	w.terms[me] = w.terms[me].After(sent, d, written, w.timing)
	return d
}

// self is replica me's process in the fake world: one per ID unless a
// test says otherwise.
func self(me string) Self { return Self{ID: me, Nonce: "nonce-" + me} }

func (w *world) leading(me string) bool { return w.terms[me].Leading(w.local) }

// leaders are the replicas leading now: never more than one.
func (w *world) leaders(ids ...string) []string {
	var out []string
	for _, id := range ids {
		if w.leading(id) {
			out = append(out, id)
		}
	}
	if len(out) > 1 {
		w.t.Fatalf("two leaders at once: %v (lease %+v)", out, *w.lease)
	}
	return out
}

func TestFirstReplicaCreatesTheLeaseAndRenewsIt(t *testing.T) {
	w := newWorld(t)
	if d := w.round("a"); d.Action != Create || d.Token != 1 {
		t.Fatalf("first round: %+v, want create with token 1", d)
	}
	if !w.leading("a") {
		t.Fatal("a does not lead after creating the lease")
	}
	for i := 0; i < 10; i++ {
		w.advance(w.timing.Renew)
		if d := w.round("a"); d.Action != Renew || d.Token != 1 {
			t.Fatalf("renewal %d: %+v, want renew with token 1", i, d)
		}
		if d := w.round("b"); d.Action != Wait {
			t.Fatalf("b while a renews: %+v, want wait", d)
		}
		if got := w.leaders("a", "b"); len(got) != 1 || got[0] != "a" {
			t.Fatalf("leaders %v, want [a]", got)
		}
	}
}

// A leader that stops renewing (killed, or cut from the store) stops
// leading at its own TTL, before anyone may take the lease; another
// takes it only past the expiry and the margin, with the next token.
func TestTakeoverAfterExpiryWithTheNextToken(t *testing.T) {
	w := newWorld(t)
	w.round("a")
	w.advance(w.timing.Renew)
	w.round("a") // the last renewal
	last := w.local
	for step := 500 * time.Millisecond; ; {
		w.advance(step)
		d := w.round("b")
		w.leaders("a", "b")
		elapsed := w.local.Sub(last)
		if elapsed < w.timing.TTL && !w.leading("a") {
			t.Fatalf("a stopped leading %v after its last renewal, before its TTL %v", elapsed, w.timing.TTL)
		}
		if elapsed >= w.timing.TTL && w.leading("a") {
			t.Fatalf("a still leads %v after its last renewal (TTL %v)", elapsed, w.timing.TTL)
		}
		if d.Action == Take {
			if elapsed <= w.timing.TTL+w.timing.Margin {
				t.Fatalf("b took the lease %v after a's last renewal, within TTL+margin %v", elapsed, w.timing.TTL+w.timing.Margin)
			}
			if d.Token != 2 || !w.leading("b") {
				t.Fatalf("b's take: %+v leading=%v, want token 2 and leading", d, w.leading("b"))
			}
			break
		}
		if elapsed > w.timing.TTL+w.timing.Margin+time.Second {
			t.Fatalf("b has not taken the lease %v after a's last renewal", elapsed)
		}
	}
	// a comes back: it reads b's lease and does not lead.
	if d := w.round("a"); d.Action != Wait || w.leading("a") {
		t.Fatalf("a back: %+v leading=%v, want wait", d, w.leading("a"))
	}
}

// The database's clock running faster than the leader's (up to the
// margin over a TTL) still never gives two leaders.
func TestSkewWithinTheMarginNeverGivesTwoLeaders(t *testing.T) {
	w := newWorld(t)
	w.round("a")
	for i := 0; i < 300; i++ {
		// The database gains 10% on the replicas' clock.
		w.dbNow += 110
		w.local = w.local.Add(100 * time.Millisecond)
		if i%50 == 0 && i < 100 {
			w.round("a")
		}
		w.round("b")
		w.leaders("a", "b")
	}
	if !w.leading("b") {
		t.Fatal("b never took the abandoned lease")
	}
}

// A released lease is taken at the next look, without waiting for the
// expiry, and the token grows.
func TestReleasedLeaseIsTakenAtOnce(t *testing.T) {
	w := newWorld(t)
	w.round("a")
	w.lease.Holder = "" // Release
	w.terms["a"] = Term{}
	w.advance(100 * time.Millisecond)
	if d := w.round("b"); d.Action != Take || d.Token != 2 {
		t.Fatalf("after release: %+v, want take with token 2", d)
	}
}

// A lease that lapsed while its holder was cut off, and that nobody
// took, is its holder's again only as a new term: a new token.
func TestLapsedLeaseIsANewTerm(t *testing.T) {
	w := newWorld(t)
	w.round("a")
	w.advance(w.timing.TTL + 500*time.Millisecond)
	if d := w.round("a"); d.Action != Wait || w.leading("a") {
		t.Fatalf("within the margin after expiry: %+v leading=%v, want wait", d, w.leading("a"))
	}
	w.advance(w.timing.Margin)
	if d := w.round("a"); d.Action != Take || d.Token != 2 {
		t.Fatalf("past the margin: %+v, want take with token 2", d)
	}
}

// A renewal racing a take (both read the expired row; the take wrote
// first) loses: the compare-and-set finds the row changed.
func TestRenewalLosingTheRaceEndsTheTerm(t *testing.T) {
	w := newWorld(t)
	w.round("a")
	w.advance(w.timing.TTL + w.timing.Margin + time.Second)
	readByA := *w.lease
	w.round("b") // b takes
	d := Decide(self("a"), &readByA, w.dbNow, w.timing)
	written := w.lease != nil && *w.lease == readByA
	w.terms["a"] = w.terms["a"].After(w.local, d, written, w.timing)
	if w.leading("a") || !w.leading("b") {
		t.Fatalf("a leading=%v b leading=%v, want b only", w.leading("a"), w.leading("b"))
	}
}

// A deposed leader's late write carries its old token: refused.
func TestDeposedLeadersWriteIsFenced(t *testing.T) {
	w := newWorld(t)
	w.round("a")
	aToken := w.terms["a"].Token
	if !FenceHolds(self("a"), aToken, w.lease) {
		t.Fatal("the leader's own write refused")
	}
	w.advance(w.timing.TTL + w.timing.Margin + time.Second)
	w.round("b")
	if FenceHolds(self("a"), aToken, w.lease) {
		t.Fatalf("a's write with token %d accepted after b took the lease (%+v)", aToken, *w.lease)
	}
	if !FenceHolds(self("b"), w.terms["b"].Token, w.lease) {
		t.Fatal("the new leader's write refused")
	}
	if FenceHolds(self("a"), 0, &Lease{Holder: "a"}) {
		t.Fatal("token 0 (never led) accepted")
	}
}

func TestLiveMembers(t *testing.T) {
	members := []Member{{ID: "a", Expires: 100}, {ID: "b", Expires: 200}, {ID: "c", Expires: 50}}
	if n := OthersLive("a", members, 100); n != 1 {
		t.Fatalf("others live at 100: %d, want 1 (b)", n)
	}
	if n := OthersLive("z", members, 10); n != 3 {
		t.Fatalf("others live at 10: %d, want 3", n)
	}
}

func TestTimingAndIDChecks(t *testing.T) {
	if err := DefaultTiming.Check(); err != nil {
		t.Fatal(err)
	}
	if err := (Timing{TTL: 10 * time.Second, Renew: 6 * time.Second}).Check(); err == nil {
		t.Fatal("one renewal per TTL accepted")
	}
	for _, id := range []string{"a", "hub-1", "host.example-3f2a"} {
		if err := CheckID(id); err != nil {
			t.Errorf("%q: %v", id, err)
		}
	}
	for _, id := range []string{"", "-a", "a-", "A", "a b", "a/b", string(make([]byte, 64))} {
		if err := CheckID(id); err == nil {
			t.Errorf("%q accepted", id)
		}
	}
}

// Two processes given one replica ID are two holders: the second waits
// while the first renews, its renewal of a row it read as the first's
// is a wait, and its fenced writes are refused. Neither leads beside
// the other.
func TestTwoProcessesWithOneIDNeverBothLead(t *testing.T) {
	w := newWorld(t)
	first, second := Self{ID: "hub", Nonce: "1111"}, Self{ID: "hub", Nonce: "2222"}
	terms := map[Self]Term{}
	round := func(me Self) Decision {
		sent, read := w.local, w.lease
		d := Decide(me, read, w.dbNow, w.timing)
		written := false
		switch d.Action {
		case Create:
			if w.lease == nil {
				w.lease = &Lease{Name: LeaderLease, Holder: me.ID, Nonce: me.Nonce, Token: d.Token, Expires: w.dbNow + w.timing.TTL.Milliseconds()}
				written = true
			}
		case Renew, Take:
			if w.lease != nil && *w.lease == *read {
				w.lease = &Lease{Name: LeaderLease, Holder: me.ID, Nonce: me.Nonce, Token: d.Token, Expires: w.dbNow + w.timing.TTL.Milliseconds()}
				written = true
			}
		}
		terms[me] = terms[me].After(sent, d, written, w.timing)
		return d
	}
	round(first)
	for range 10 {
		if d := round(second); d.Action != Wait {
			t.Fatalf("the second process with ID hub: %v, want wait while the first holds the lease", d.Action)
		}
		round(first)
		w.advance(w.timing.Renew)
		if terms[first].Leading(w.local) == terms[second].Leading(w.local) {
			t.Fatalf("first leading=%v second leading=%v, want the first only", terms[first].Leading(w.local), terms[second].Leading(w.local))
		}
	}
	token := terms[first].Token
	if FenceHolds(second, token, w.lease) {
		t.Fatal("the second process's write with the first's token passed the fence")
	}
	if !FenceHolds(first, token, w.lease) {
		t.Fatal("the holder's own write refused")
	}
	// The first dies: the second takes over past the margin, a new term.
	w.advance(w.timing.TTL + w.timing.Margin + time.Second)
	if d := round(second); d.Action != Take || d.Token != token+1 {
		t.Fatalf("the second after the first died: %+v, want a take of token %d", d, token+1)
	}
	if FenceHolds(first, token+1, w.lease) {
		t.Fatal("the first process passes the fence of the second's term")
	}
}

// A live row of another process with one's ID is found (Start refuses
// it); one's own, a dead one's or another ID's are not.
func TestSameIDFindsAnotherLiveProcess(t *testing.T) {
	me := Self{ID: "hub", Nonce: "1111"}
	members := []Member{{ID: "hub", Nonce: "1111", Expires: 200}, {ID: "other", Nonce: "2222", Expires: 200}}
	if m := SameID(me, members, 100); m != nil {
		t.Fatalf("SameID: %+v, want none", *m)
	}
	members[0].Nonce = "2222"
	if m := SameID(me, members, 100); m == nil || m.ID != "hub" {
		t.Fatalf("SameID: %v, want the other process's row", m)
	}
	if m := SameID(me, members, 300); m != nil {
		t.Fatalf("SameID of a dead row: %+v, want none", *m)
	}
}

// A row of another process with one's ID is taken for dead once silent
// past the period and margin (or expired), not before.
func TestSilentRowOfTheSameID(t *testing.T) {
	m := Member{ID: "hub", Nonce: "1111", Heartbeat: 1000, Expires: 16000}
	after := 7 * time.Second
	for _, c := range []struct {
		now  int64
		want bool
	}{{1000, false}, {7999, false}, {8000, true}, {16000, true}} {
		if got := Silent(m, c.now, after); got != c.want {
			t.Errorf("Silent at %d: %v, want %v", c.now, got, c.want)
		}
	}
}
