package replica

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/podvisor/podvisor/sqldb"
)

// Config is a replica's identity and its lease timing.
type Config struct {
	// ID names the replica (podhub serve --replica-id).
	ID string
	// Address is where its API or HTTPS listener is reached, shown by
	// podhub get replicas.
	Address string
	// Version is podhub's version.
	Version string
	// Timing is the lease's (DefaultTiming if zero).
	Timing Timing
	// Poll is how often a replica that does not lead looks at the lease
	// (a read; a write only when it may take it): a released lease is
	// taken within Poll. Default 1s.
	Poll time.Duration
	// Log is where leadership changes are told.
	Log *slog.Logger
	// Predecessor is the nonce of the process that last ran with this
	// replica's data directory, known to be dead (its lock on the
	// directory was free): a live-looking row of its ID with that nonce
	// is taken over at once, not after watching it stay silent.
	Predecessor string
}

// Elector runs the replica's membership and its part in the leader
// election: Start joins and makes a first attempt, a loop renews or
// tries to take the lease, Stop hands it over. On SQLite, where one
// replica only may run, the replica leads from Start to Stop whatever
// its renewals (nothing changes for a single podhub), and Start refuses
// to run beside another live replica.
type Elector struct {
	store  *Store
	cfg    Config
	static bool
	// self is this process: the ID and a nonce of its own.
	self Self

	mu        sync.Mutex
	term      Term
	lastToken int64 // the token of the newest term, kept after it ends (Fence)
	known     time.Time
	others    int // other live replicas at Join
	watch     func(leading bool)
	leading   bool // as last told to watch
	// beforeJoin runs in Start before the replica's row is written.
	beforeJoin func() error

	stop chan struct{}
	done chan struct{}

	// Device ownership (owners.go). own is the buckets held and their
	// validity, replaced whole (Owns reads it on every device message
	// without a lock); hold is held for reading by the handling of a
	// device's message (WithOwned) and for writing by a release, which
	// so waits for the message in hand before the row goes.
	own         atomic.Pointer[Ownership]
	hold        sync.RWMutex
	watchOwners func(gained, lost []int)
}

// forever is the validity of a lone replica's ownership (SQLite).
var forever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// New is an elector of the replica cfg.ID over store.
func New(store *Store, cfg Config) (*Elector, error) {
	if cfg.Timing == (Timing{}) {
		cfg.Timing = DefaultTiming
	}
	if err := cfg.Timing.Check(); err != nil {
		return nil, err
	}
	if err := CheckID(cfg.ID); err != nil {
		return nil, err
	}
	if cfg.Poll <= 0 {
		cfg.Poll = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	// A round that hangs on the store past a renewal period fails: the
	// next is due.
	store.SetTimeout(cfg.Timing.Renew)
	nonce := make([]byte, 8)
	rand.Read(nonce)
	return &Elector{store: store, cfg: cfg, static: store.Dialect() == sqldb.SQLite,
		self: Self{ID: cfg.ID, Nonce: hex.EncodeToString(nonce)}}, nil
}

// Watch has fn told of each change of leadership (true: this replica
// leads), from the elector's goroutine; set before Start.
func (e *Elector) Watch(fn func(leading bool)) { e.watch = fn }

// BeforeJoin has fn run by Start before the replica's row is written
// (after its own ID's row was checked): what must happen before the
// other replicas can see this one, such as forgetting the presence of a
// fleet no replica served (fleetdb.Fleet.ForgetPresenceAlone). An error
// of fn fails Start. Set before Start.
func (e *Elector) BeforeJoin(fn func() error) { e.beforeJoin = fn }

// WatchOwners has fn told of the device buckets this replica gains and
// loses, from the elector's goroutine (the first time within Start);
// set before Start. A bucket lost is no longer handled when fn hears
// of it.
func (e *Elector) WatchOwners(fn func(gained, lost []int)) { e.watchOwners = fn }

// Owns reports whether this replica handles device's reports now: its
// bucket is held and the ownership valid on this replica's clock (its
// membership term not run out unrenewed). On SQLite: always, from Start
// to Stop.
func (e *Elector) Owns(device string) bool {
	return e.own.Load().Owns(device, time.Now())
}

// WithOwned runs handle if this replica owns device, holding the owner
// set meanwhile (a release of the device's bucket waits for it), and
// reports whether it ran.
func (e *Elector) WithOwned(device string, handle func()) bool {
	e.hold.RLock()
	defer e.hold.RUnlock()
	if !e.Owns(device) {
		return false
	}
	handle()
	return true
}

// Ownership is the buckets this replica holds and their validity (nil
// before Start).
func (e *Elector) Ownership() *Ownership { return e.own.Load() }

// Timing is the lease's timing.
func (e *Elector) Timing() Timing { return e.cfg.Timing }

// ID is the replica's ID.
func (e *Elector) ID() string { return e.cfg.ID }

// Start joins the replicas (refusing, on SQLite, to run beside another
// live one, and anywhere beside a live process with its ID: ErrIDInUse),
// makes a first attempt at the lease and starts the loop.
func (e *Elector) Start() error {
	members, now, err := e.store.Members()
	if err != nil {
		return fmt.Errorf("replica %s: reading the replicas: %w", e.cfg.ID, err)
	}
	stale, err := e.sameID(members, now)
	if err != nil {
		return err
	}
	e.others = OthersLive(e.cfg.ID, members, now)
	if e.static && e.others > 0 {
		var ids []string
		for _, m := range members {
			if m.ID != e.cfg.ID && m.Live(now) {
				ids = append(ids, m.ID)
			}
		}
		return fmt.Errorf("replica %s: another podhub (replica %v) serves this SQLite fleet store; several replicas need a PostgreSQL store (store: postgres://…)", e.cfg.ID, ids)
	}
	if e.beforeJoin != nil {
		if err := e.beforeJoin(); err != nil {
			return fmt.Errorf("replica %s: before joining: %w", e.cfg.ID, err)
		}
	}
	if err := e.store.Join(e.member(), e.cfg.Timing.TTL, stale); err != nil {
		if errors.Is(err, ErrIDInUse) {
			return e.idInUse(nil, now)
		}
		return err
	}
	if err := e.attempt(); err != nil {
		if e.static {
			return err
		}
		e.cfg.Log.Warn("leader lease: first attempt", "err", err)
	}
	e.mu.Lock()
	e.stop, e.done = make(chan struct{}), make(chan struct{})
	e.mu.Unlock()
	go e.loop()
	return nil
}

// sameID looks for a live row of another process with the replica's ID
// among members read at now: none (nil), one that proves alive by
// heartbeating within its round period and the margin (ErrIDInUse), or
// one that stays silent that long (returned: a process killed and
// restarted at once; Join replaces its row).
func (e *Elector) sameID(members []Member, now int64) (*Member, error) {
	m := SameID(e.self, members, now)
	if m == nil {
		return nil, nil
	}
	if e.cfg.Predecessor != "" && m.Nonce == e.cfg.Predecessor {
		return m, nil // this data directory's previous process, dead
	}
	after := max(e.cfg.Timing.Renew, e.cfg.Poll) + e.cfg.Timing.Margin
	for !Silent(*m, now, after) {
		time.Sleep(time.Duration(m.Heartbeat+after.Milliseconds()-now)*time.Millisecond + 10*time.Millisecond)
		members, now2, err := e.store.Members()
		if err != nil {
			return nil, fmt.Errorf("replica %s: reading the replicas: %w", e.cfg.ID, err)
		}
		now = now2
		again := SameID(e.self, members, now)
		switch {
		case again == nil:
			return nil, nil // it left, or its row expired
		case again.Nonce != m.Nonce || again.Heartbeat != m.Heartbeat:
			return nil, e.idInUse(again, now) // alive
		}
	}
	e.cfg.Log.Warn("replica: the row of a process with this ID is silent; taking it over", "replica", e.cfg.ID, "silent", time.Duration(now-m.Heartbeat)*time.Millisecond)
	return m, nil
}

// member is the replica's row.
func (e *Elector) member() Member {
	return Member{ID: e.cfg.ID, Nonce: e.self.Nonce, Address: e.cfg.Address, Version: e.cfg.Version}
}

// idInUse is Start's refusal to run beside m (nil: unknown), a live
// process with the replica's ID.
func (e *Elector) idInUse(m *Member, now int64) error {
	var where string
	if m != nil {
		where = fmt.Sprintf(" (at %q, heard from %v ago)", m.Address, time.Duration(now-m.Heartbeat)*time.Millisecond)
	}
	return fmt.Errorf("replica %s: %w%s: give each podhub its own replica ID (--replica-id or replicaID: in podhub.yaml; by default each data directory has its own, in <data-dir>/replica-id)",
		e.cfg.ID, ErrIDInUse, where)
}

// OthersAtStart is how many other replicas were alive when this one
// joined: with none on SQLite, the fleet's presence is stale (the hub
// was down) and is forgotten at start (on PostgreSQL the hub decides it
// atomically with the others' joins: BeforeJoin).
func (e *Elector) OthersAtStart() int { return e.others }

// Leading reports whether the replica leads now: its term has not run
// out on its own clock (on SQLite: from Start to Stop).
func (e *Elector) Leading() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.leadingLocked(time.Now())
}

func (e *Elector) leadingLocked(now time.Time) bool {
	if e.static {
		return e.lastToken != 0 && e.stop != nil
	}
	return e.term.Leading(now)
}

// Token is the fencing token of the replica's newest term (0: it never
// led), kept after the term ends so that a late write of a deposed
// leader is refused by the store (Fence), not silently skipped.
func (e *Elector) Token() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.lastToken
}

// Fence checks in tx that the replica's newest term is still the
// lease's (Store.Fence): for the leader's writes.
func (e *Elector) Fence(tx *sql.Tx) error {
	return e.store.Fence(tx, LeaderLease, e.self, e.Token())
}

// Known reports whether the lease's state was read within a TTL: the
// replica knows who leads (readiness).
func (e *Elector) Known() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return !e.known.IsZero() && time.Since(e.known) < e.cfg.Timing.TTL
}

// attempt reads the lease, decides and writes: one round of the
// election, and a heartbeat of the replica's row.
func (e *Elector) attempt() error {
	sent := time.Now()
	if ok, err := e.store.Heartbeat(e.self, e.cfg.Timing.TTL); err != nil {
		return err
	} else if !ok {
		if err := e.store.Join(e.member(), e.cfg.Timing.TTL, nil); err != nil {
			return err
		}
	}
	if err := e.ownersRound(sent); err != nil {
		e.cfg.Log.Warn("device owners", "replica", e.cfg.ID, "err", err)
	}
	l, now, err := e.store.ReadLease(LeaderLease)
	if err != nil {
		return err
	}
	d := Decide(e.self, l, now, e.cfg.Timing)
	if e.static && d.Action == Wait {
		// SQLite's one replica (Start refused to run beside a live one):
		// a lease left by a dead replica of another ID is its own at once.
		d = Decision{Action: Take, Token: l.Token + 1}
	}
	written, err := e.store.WriteLease(LeaderLease, e.self, l, d, e.cfg.Timing.TTL)
	if err != nil {
		return err
	}
	e.mu.Lock()
	e.known = time.Now()
	prev := e.term
	e.term = e.term.After(sent, d, written, e.cfg.Timing)
	if e.term.Token != 0 {
		e.lastToken = e.term.Token
	}
	e.mu.Unlock()
	if e.term.Token != 0 && prev.Token != e.term.Token {
		e.cfg.Log.Info("leader lease taken: this replica leads", "replica", e.cfg.ID, "token", e.term.Token, "action", d.Action.String())
	}
	if prev.Token != 0 && e.term.Token == 0 && l != nil {
		e.cfg.Log.Warn("leader lease lost", "replica", e.cfg.ID, "holder", l.Holder, "token", l.Token)
	}
	return nil
}

// loop renews (leading) or looks at (not leading) the lease, and tells
// the watcher when the leadership changes, at once when a term runs out
// unrenewed.
func (e *Elector) loop() {
	defer close(e.done)
	e.mu.Lock()
	stop := e.stop
	e.mu.Unlock()
	timer := time.NewTimer(0)
	defer timer.Stop()
	lastPrune := time.Now()
	for {
		e.notify()
		select {
		case <-stop:
			return
		case <-timer.C:
		}
		e.mu.Lock()
		leading := e.leadingLocked(time.Now())
		e.mu.Unlock()
		if err := e.attempt(); err != nil {
			e.cfg.Log.Warn("leader lease", "replica", e.cfg.ID, "err", err)
		}
		if leading && time.Since(lastPrune) > time.Minute {
			lastPrune = time.Now()
			if err := e.store.Prune(time.Hour); err != nil {
				e.cfg.Log.Warn("removing replicas dead for an hour", "err", err)
			}
		}
		e.notify()
		// The next round: a renewal period while leading, a poll while
		// not, and no later than the term's end, to step down on time.
		e.mu.Lock()
		now := time.Now()
		next := e.cfg.Poll
		if e.leadingLocked(now) {
			next = e.cfg.Timing.Renew
			if !e.static {
				next = min(next, e.term.Until.Sub(now))
			}
		}
		e.mu.Unlock()
		timer.Reset(max(next, time.Millisecond))
	}
}

// notify tells the watcher of a change of leadership.
func (e *Elector) notify() {
	e.mu.Lock()
	now := e.leadingLocked(time.Now())
	changed := now != e.leading
	e.leading = now
	e.mu.Unlock()
	if changed {
		if !now {
			e.cfg.Log.Warn("leader work stopped: the lease is not renewed", "replica", e.cfg.ID)
		}
		if e.watch != nil {
			e.watch(now)
		}
	}
}

// Stop ends the loop, tells the watcher the replica no longer leads
// (its leader work stops first), then releases the lease, so that
// another replica takes it at its next look rather than at the expiry,
// and removes the replica's row.
func (e *Elector) Stop() error {
	e.mu.Lock()
	stop := e.stop
	e.mu.Unlock()
	if stop == nil {
		return nil
	}
	close(stop)
	<-e.done
	// The devices first: handling stops (the message in hand finished),
	// then the rows go, so the others take them at their next round.
	e.setOwnership(nil, nil, e.own.Load().Held())
	if !e.static {
		if err := e.store.ReleaseAll(e.self); err != nil {
			e.cfg.Log.Warn("releasing the device buckets", "err", err)
		}
	}
	e.mu.Lock()
	token := e.lastToken
	wasLeading := e.leading
	e.term = Term{}
	e.leading = false
	e.stop = nil
	e.mu.Unlock()
	if wasLeading && e.watch != nil {
		e.watch(false)
	}
	var err error
	if token != 0 {
		released, rerr := e.store.Release(LeaderLease, e.self, token)
		if rerr != nil {
			err = rerr
		} else if released {
			e.cfg.Log.Info("leader lease released", "replica", e.cfg.ID, "token", token)
		}
	}
	if lerr := e.store.Leave(e.self); lerr != nil && err == nil {
		err = lerr
	}
	return err
}

// Nonce is this process's nonce (kept in the data directory, so that the
// next process there knows its predecessor: Config.Predecessor).
func (e *Elector) Nonce() string { return e.self.Nonce }

// ownersRound is the ownership part of a round whose heartbeat was sent
// at sent (and written): on SQLite every bucket; elsewhere the buckets
// the rows give this process, rebalanced (Rebalance), valid until sent
// plus the TTL. After a lapse (the ownership ran out before sent) the
// rows still held are reclaimed first (Store.Reclaim), so a take decided
// on them before fails, and all of them count as gained.
func (e *Elector) ownersRound(sent time.Time) error {
	cur := e.own.Load()
	until := sent.Add(e.cfg.Timing.TTL)
	if e.static {
		if cur == nil {
			e.setOwnership(new(Ownership).With(AllBuckets(), true, forever), AllBuckets(), nil)
		}
		return nil
	}
	lapsed := cur == nil || !sent.Before(cur.Until)
	if lapsed {
		if _, err := e.store.Reclaim(e.self); err != nil {
			return err
		}
	}
	members, _, err := e.store.Members()
	if err != nil {
		return err
	}
	owners, now, err := e.store.Owners()
	if err != nil {
		return err
	}
	var held []int
	for _, o := range owners {
		if o.heldBy(e.self) {
			held = append(held, o.Bucket)
		}
	}
	take, release := Rebalance(e.self, members, owners, now, e.cfg.Timing)
	next := new(Ownership).With(held, true, until).With(release, false, until)
	var before *Ownership
	if !lapsed {
		before = cur
	}
	if len(release) > 0 {
		// Handling of the released buckets stops before their rows go.
		e.setOwnership(next, nil, release)
		before = next
		if err := e.store.ReleaseBuckets(e.self, release); err != nil {
			return err
		}
		e.cfg.Log.Info("device buckets released", "replica", e.cfg.ID, "count", len(release), "held", next.Count())
	}
	if len(take) > 0 {
		taken, err := e.store.TakeBuckets(e.self, take, owners, e.cfg.Timing.Margin)
		next = next.With(taken, true, until)
		if len(taken) > 0 {
			e.cfg.Log.Info("device buckets taken", "replica", e.cfg.ID, "count", len(taken), "held", next.Count())
		}
		if err != nil {
			e.setOwnership(next, diff(next, before), diff(before, next))
			return err
		}
	}
	e.setOwnership(next, diff(next, before), diff(before, next))
	return nil
}

// setOwnership makes o the replica's ownership, under the hold's write
// lock (messages in hand finish first), and tells the watcher what it
// gained and lost, if anything.
func (e *Elector) setOwnership(o *Ownership, gained, lost []int) {
	e.hold.Lock()
	e.own.Store(o)
	e.hold.Unlock()
	if e.watchOwners != nil && (len(gained) > 0 || len(lost) > 0) {
		e.watchOwners(gained, lost)
	}
}

// diff is the buckets a holds and b does not (either may be nil).
func diff(a, b *Ownership) []int {
	var out []int
	for _, x := range a.Held() {
		if !b.Has(x) {
			out = append(out, x)
		}
	}
	return out
}
