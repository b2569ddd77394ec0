package fleetdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
)

// ChangeChannel is the PostgreSQL channel the fleet's changes are
// NOTIFYed on, for every replica on the store to hear (see replicas).
const ChangeChannel = "podhub_changes"

// replicas tells the other podhub replicas on a PostgreSQL store of
// this one's changes, and this one's feed of theirs. On SQLite (one
// replica) it does nothing.
//
// A write transaction sends its change with pg_notify before it commits:
// PostgreSQL delivers it only if the transaction commits, in commit
// order, so a reader on another replica never hears of a write that
// rolled back nor ahead of one it depends on. What is published outside
// the store (a scheduling pass, a silence) goes through the feed's relay:
// queued, coalesced, sent by one goroutine. Each replica LISTENs on a
// connection of its own, skips its own notifications (tagged with its
// instance ID) and delivers the others' to its feed; after a lost
// connection (whose notifications are gone) it delivers an Everything
// change so its readers re-read all, with every signal (Missed).
type replicas struct {
	url      string
	instance string // hex, random at each open
	log      *slog.Logger

	once sync.Once
	stop context.CancelFunc
	done sync.WaitGroup

	mu      sync.Mutex
	pending fleetwatch.Notes
	wake    chan struct{}
	// listened: LISTEN was in place once; late: after the first Changes
	// stopped waiting for it (firstListenWait).
	listened, late bool
	// pid is the listening connection's server process, for tests.
	pid uint32

	// notify sends one payload (nil: pg_notify on the store); retryFirst
	// and retryMax bound the backoff after a failure (zero: the
	// defaults). For tests.
	notify               func(ctx context.Context, payload string) error
	retryFirst, retryMax time.Duration
}

func newReplicas(url string) *replicas {
	id := make([]byte, 8)
	rand.Read(id)
	return &replicas{url: url, instance: hex.EncodeToString(id), pending: fleetwatch.Notes{}, wake: make(chan struct{}, 1)}
}

// SetLog sets where the change feed across replicas logs its connection
// losses (before the first Changes; nil: slog's default logger).
func (f *Fleet) SetLog(l *slog.Logger) {
	if f.replicas != nil {
		f.replicas.log = l
	}
}

// firstListenWait bounds how long the first Changes waits for LISTEN.
const firstListenWait = 5 * time.Second

// follow starts, once, listening to the other replicas and relaying this
// one's publications: on the first Changes, as only a fleet whose
// changes are read or published (podhub serve's) needs it, not a
// command's. It returns once LISTEN is in place (firstListenWait at
// most), so that a reader subscribed after it, whose first read comes
// after that, misses no commit; if LISTEN came later, or again after a
// lost connection, the readers may have missed some: they are told to
// re-read all (an Everything change).
func (f *Fleet) follow() {
	r := f.replicas
	if r == nil {
		return
	}
	r.once.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		r.stop = cancel
		f.changes.SetRelay(r.relay)
		ready := make(chan struct{})
		if r.log == nil {
			r.log = slog.Default() // a lost connection is worth a line somewhere
		}
		l := &postgres.Listener{
			URL: r.url, Channel: ChangeChannel, Log: r.log,
			Notify: func(p string) { r.heard(&f.changes, p) },
			Listening: func(pid uint32, _ bool) {
				r.mu.Lock()
				first, late := !r.listened, r.late
				r.listened = true
				r.mu.Unlock()
				if !first || late {
					// Readers re-read all, object links too; a leader runs
					// the passes it may not have been asked for.
					f.changes.Receive([]fleetwatch.Note{{What: fleetwatch.Missed}})
				}
				r.mu.Lock()
				r.pid = pid
				r.mu.Unlock()
				if first {
					close(ready)
				}
			},
		}
		r.done.Add(2)
		go func() { defer r.done.Done(); l.Run(ctx) }()
		go func() { defer r.done.Done(); r.send(ctx, f.db) }()
		t := time.NewTimer(firstListenWait)
		defer t.Stop()
		select {
		case <-ready:
		case <-t.C:
			r.mu.Lock()
			r.late = !r.listened
			r.mu.Unlock()
		}
	})
}

// close stops listening and relaying (what waits to be relayed is sent
// first, within relayTimeout).
func (r *replicas) close() {
	if r == nil {
		return
	}
	r.once.Do(func() {}) // never started: nothing to stop
	if r.stop != nil {
		r.stop()
		r.done.Wait()
	}
}

// heard delivers a notification's changes, unless this replica sent it.
func (r *replicas) heard(feed *fleetwatch.Feed, payload string) {
	instance, notes, err := fleetwatch.Decode(payload)
	if err != nil {
		if r.log != nil {
			r.log.Warn("store: a change notification ignored", "err", err)
		}
		return
	}
	if instance == r.instance {
		return
	}
	feed.Receive(notes)
}

// relay queues a change published outside the store for the others.
func (r *replicas) relay(n fleetwatch.Note) {
	r.mu.Lock()
	r.pending.Add(n)
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// relayTimeout bounds one relayed notification's send.
const relayTimeout = 10 * time.Second

// relayRetryFirst and relayRetryMax bound the wait before a failed
// relay is sent again (doubling from the first to the max).
const (
	relayRetryFirst = 100 * time.Millisecond
	relayRetryMax   = 5 * time.Second
)

// send NOTIFYs what relay queued, coalesced, until ctx ends (then what
// is left, once). A send that fails (a lost connection, a timeout) puts
// its notes back, to go with the next ones after a bounded backoff: a
// leader's passes are started only by these signals, so dropping one
// would leave a pass undone until the next change.
func (r *replicas) send(ctx context.Context, db *sql.DB) {
	notify := r.notify
	if notify == nil {
		notify = func(ctx context.Context, payload string) error {
			_, err := db.ExecContext(ctx, `SELECT pg_notify(?, ?)`, ChangeChannel, payload)
			return err
		}
	}
	first, limit := r.retryFirst, r.retryMax
	if first <= 0 {
		first, limit = relayRetryFirst, relayRetryMax
	}
	backoff := first
	retry := (<-chan time.Time)(nil)
	for {
		select {
		case <-ctx.Done():
		case <-r.wake:
		case <-retry:
		}
		r.mu.Lock()
		notes := r.pending
		r.pending = fleetwatch.Notes{}
		r.mu.Unlock()
		var failed error
		for _, p := range fleetwatch.Encode(r.instance, notes) {
			sctx, cancel := context.WithTimeout(context.Background(), relayTimeout)
			failed = notify(sctx, p)
			cancel()
			if failed != nil {
				break
			}
		}
		if ctx.Err() != nil {
			if failed != nil && r.log != nil {
				r.log.Warn("store: telling the other replicas of a change, at close", "err", failed)
			}
			return
		}
		if failed == nil {
			backoff, retry = first, nil
			continue
		}
		// All back (some may go twice: a note only has readers re-read),
		// joined with what came meanwhile.
		r.mu.Lock()
		for _, n := range notes {
			r.pending.Add(n)
		}
		r.mu.Unlock()
		if r.log != nil {
			r.log.Warn("store: telling the other replicas of a change; retrying", "err", failed, "in", backoff)
		}
		retry = time.After(backoff)
		backoff = min(2*backoff, limit)
	}
}

// commit commits tx, which made the changes notes name, telling the
// other replicas of them inside it (PostgreSQL: pg_notify, heard only if
// it commits). The caller delivers them to this replica's feed.
func (f *Fleet) commit(tx *sql.Tx, notes ...fleetwatch.Note) error {
	if f.replicas != nil {
		ns := fleetwatch.Notes{}
		for _, n := range notes {
			ns.Add(n)
		}
		for _, p := range fleetwatch.Encode(f.replicas.instance, ns) {
			if _, err := tx.Exec(`SELECT pg_notify(?, ?)`, ChangeChannel, p); err != nil {
				return fmt.Errorf("telling the other replicas of the change: %w", err)
			}
		}
	}
	return tx.Commit()
}

// exec runs one write statement that changes what note names; on
// PostgreSQL in a transaction with its notification (commit).
func (f *Fleet) exec(note fleetwatch.Note, query string, args ...any) (sql.Result, error) {
	if f.replicas == nil {
		return f.db.Exec(query, args...)
	}
	tx, err := f.db.Begin()
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	res, err := tx.Exec(query, args...)
	if err != nil {
		return nil, err
	}
	return res, f.commit(tx, note)
}

// maxObjectsNotes bounds the devices one write tells the other replicas'
// object links of by name; past it, one note of the fleet has them read
// all again (cheaper than a notification per device).
const maxObjectsNotes = 256

// objectsNotes tells the other replicas' object links that devices'
// desired pods or object indexes changed (fleetwatch.Objects, a signal:
// no reader is told). This replica's link made the change: it is not
// told.
func objectsNotes(devices []string) []fleetwatch.Note {
	if len(devices) > maxObjectsNotes {
		return []fleetwatch.Note{{What: fleetwatch.Objects}}
	}
	notes := make([]fleetwatch.Note, len(devices))
	for i, d := range devices {
		notes[i] = fleetwatch.Note{Device: d, What: fleetwatch.Objects}
	}
	return notes
}
