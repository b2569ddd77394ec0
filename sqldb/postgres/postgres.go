// Package postgres opens a PostgreSQL database for podhub's fleet store
// through pgx's database/sql driver, speaking the SQL the SQLite store's
// queries are written in: the connection rewrites their ? placeholders
// ($1, $2, …), hands booleans over as the 0/1 integers SQLite stores,
// and makes every transaction hold the store's writer lock, so that the
// fleet's read-modify-write transactions stay serialized as SQLite's
// immediate transactions on one connection keep them: exclusively, or,
// for a transaction that touches one device's rows only (ForDevice),
// shared with the other devices' and exclusive per device (see BeginTx).
// Only podhub links it: the device daemon's store is SQLite alone.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"hash/fnv"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/podvisor/podvisor/sqldb"
)

// IsURL reports whether s names a PostgreSQL database (postgres:// or
// postgresql://).
func IsURL(s string) bool {
	return strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://")
}

// WriterLock is the advisory lock key every transaction on the store
// takes first: exclusive (pg_advisory_xact_lock), one writer at a time
// as on SQLite, whichever connection or podhub it runs on; shared
// (pg_advisory_xact_lock_shared) by a device's transaction (ForDevice),
// which then takes its device's lock (DeviceLockClass).
const WriterLock int64 = 0x706f646875620001 // "podhub", store 1

// DeviceLockClass is the first key of the device locks, the two-key
// advisory locks pg_advisory_xact_lock(DeviceLockClass, DeviceLockKey(id))
// a device's transaction holds. Two-key advisory locks are a key space
// of their own (pg_locks.objsubid 2), apart from the one-key locks of
// the store (WriterLock, sqldb.MigrateLock, the scheduling lock), so a
// device's key can never be one of those. DeviceLockKey is a 32-bit
// hash: two devices may share a key (among a million devices some
// hundred pairs do); theirs then run one after the other, as every
// transaction did before, which costs time, never correctness.
const DeviceLockClass int32 = 0x706f6401 // "pod", 1

// DeviceLockKey is a device's key under DeviceLockClass: its ID's
// FNV-1a hash.
func DeviceLockKey(device string) int32 {
	h := fnv.New32a()
	h.Write([]byte(device))
	return int32(h.Sum32())
}

// deviceScope is the context key ForDevice sets.
type deviceScope struct{}

// ForDevice is ctx for beginning a transaction that reads and writes
// only device's rows (its reports: a status batch, a heartbeat, an ack):
// BeginTx then takes the writer lock shared, so that other devices'
// transactions run beside it, and device's lock exclusively, so that
// the same device's do not. A transaction that reads or writes anything
// another device's transaction may write must not use it.
func ForDevice(ctx context.Context, device string) context.Context {
	return context.WithValue(ctx, deviceScope{}, device)
}

// MaxConns bounds the pool: readers run side by side, writers one at a
// time behind the writer lock.
const MaxConns = 8

// connectTimeout bounds the first connection Open makes.
const connectTimeout = 15 * time.Second

// Open connects to the database rawURL names and checks that it answers.
// Errors never carry the URL's password (Mask).
func Open(rawURL string) (*sql.DB, error) {
	passwords := passwordsOf(rawURL)
	cfg, err := pgx.ParseConfig(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store %s: %w", Mask(rawURL), scrub(err, passwords...))
	}
	// One from a passfile or the environment is kept out of errors too.
	passwords = append(passwords, cfg.Password)
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "podhub"
	}
	// A writer that cannot have the writer lock within a minute fails
	// rather than waits without bound behind a stuck transaction.
	if _, ok := cfg.RuntimeParams["lock_timeout"]; !ok {
		cfg.RuntimeParams["lock_timeout"] = "60s"
	}
	db := sql.OpenDB(connector{stdlib.GetConnector(*cfg)})
	db.SetMaxOpenConns(MaxConns)
	db.SetMaxIdleConns(MaxConns)
	db.SetConnMaxIdleTime(5 * time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), connectTimeout)
	defer cancel()
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("store %s: connecting (within %s): %w", Mask(rawURL), connectTimeout, scrub(err, passwords...))
	}
	return db, nil
}

// Mask is rawURL with its passwords (the user information's, and the
// password= and sslpassword= parameters', however %-escaped) replaced by
// xxxxx: what errors and logs show. A URL that does not parse is shown
// as its scheme only.
func Mask(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		if i := strings.Index(rawURL, "://"); i >= 0 {
			return rawURL[:i] + "://(a URL that does not parse)"
		}
		return "(a URL that does not parse)"
	}
	if _, ok := u.User.Password(); ok {
		u.User = url.UserPassword(u.User.Username(), "xxxxx")
	}
	// The query is masked pair by pair as written: url.Query drops a
	// pair it cannot decode (password=a%zz), which would leave it shown.
	if u.RawQuery != "" {
		pairs := strings.Split(u.RawQuery, "&")
		for i, pair := range pairs {
			if key, _, ok := strings.Cut(pair, "="); ok && secretParam(key) {
				pairs[i] = key + "=xxxxx"
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
	}
	return u.String()
}

// secretParam reports whether a URL query key (as written, maybe
// %-escaped) names a password.
func secretParam(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	key = strings.ToLower(key)
	return key == "password" || key == "sslpassword"
}

// passwordsOf is every form of the passwords rawURL carries, as written
// (%-escaped) and decoded, longest first: what an error may quote.
// It reads rawURL as written, so a URL that does not parse (a bad
// %-escape) still gives them.
func passwordsOf(rawURL string) []string {
	var raw []string
	rest := rawURL
	if i := strings.Index(rest, "://"); i >= 0 {
		rest = rest[i+3:]
	}
	authority, query := rest, ""
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		authority = rest[:i]
	}
	if i := strings.LastIndexByte(authority, '@'); i >= 0 {
		if _, p, ok := strings.Cut(authority[:i], ":"); ok {
			raw = append(raw, p)
		}
	}
	if i := strings.IndexByte(rest, '?'); i >= 0 {
		query, _, _ = strings.Cut(rest[i+1:], "#")
	}
	for _, pair := range strings.Split(query, "&") {
		if key, v, ok := strings.Cut(pair, "="); ok && secretParam(key) {
			raw = append(raw, v)
		}
	}
	var out []string
	for _, p := range raw {
		out = append(out, p)
		if d, err := url.PathUnescape(p); err == nil {
			out = append(out, d)
		}
		if d, err := url.QueryUnescape(p); err == nil {
			out = append(out, d)
		}
	}
	out = slices.DeleteFunc(out, func(s string) bool { return s == "" })
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// scrub is err with every occurrence of each password replaced.
func scrub(err error, passwords ...string) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	for _, p := range passwords {
		if p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	if msg == err.Error() {
		return err
	}
	return errors.New(msg)
}

// connector makes the pool's connections: pgx's, wrapped in conn.
type connector struct{ driver.Connector }

func (c connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	pc, ok := dc.(*stdlib.Conn)
	if !ok {
		dc.Close()
		return nil, fmt.Errorf("pgx's database/sql driver gave a %T", dc)
	}
	return conn{pc}, nil
}

// conn is a pgx connection speaking the SQLite store's SQL. Everything
// it does not override is pgx's own (embedding keeps the optional
// interfaces database/sql looks for: sessions reset, validity, pings).
type conn struct{ *stdlib.Conn }

func (c conn) Prepare(query string) (driver.Stmt, error) {
	return c.Conn.Prepare(sqldb.Rebind(query))
}

func (c conn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	return c.Conn.PrepareContext(ctx, sqldb.Rebind(query))
}

func (c conn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.ExecContext(ctx, sqldb.Rebind(query), args)
}

func (c conn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	return c.Conn.QueryContext(ctx, sqldb.Rebind(query), args)
}

// CheckNamedValue hands a bool over as SQLite stores it, 0 or 1 (the
// store's flags are BIGINT columns on both engines); every other value
// goes to pgx as it is.
func (c conn) CheckNamedValue(v *driver.NamedValue) error {
	if b, ok := v.Value.(bool); ok {
		v.Value = int64(0)
		if b {
			v.Value = int64(1)
		}
	}
	return nil
}

func (c conn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// BeginTx begins a transaction holding the store's writer lock:
// exclusively, or, with a ctx of ForDevice, shared and with the device's
// lock.
//
// Why a lock and not SERIALIZABLE with retries: the fleet's transactions
// were written for SQLite, where an immediate transaction on the one
// connection runs alone: each reads, decides and writes (a desired
// document's generation, a device's mirror count, a revision number, a
// PodDisruptionBudget's allowance) trusting that nothing moved
// meanwhile, and several do work outside the database between their
// statements (sealing, publishing to the change feed). Taking one
// transaction-scoped advisory lock first keeps exactly that guarantee on
// PostgreSQL's many connections: a writer waits for the one before it
// and then, at READ COMMITTED, sees all it wrote. Nothing needs a retry
// loop (which would run such side effects twice), and readers outside
// transactions never wait.
//
// A device's report transactions (ForDevice) read and write only that
// device's rows, so they need the guarantee only against the fleet-wide
// transactions and the same device's: they hold the writer lock shared
// (many at once, none beside an exclusive holder) and the device's lock
// exclusively. A fleet-wide transaction still runs alone, as on SQLite.
// No deadlock can form: every transaction takes the writer lock first,
// then at most one device lock, never another lock after (a lock order
// of writer, then device); a device transaction waiting for its device
// holds the writer lock shared, which only an exclusive waiter would
// want, and that waiter waits for the device lock's holder, who waits for
// nothing.
//
// The default transaction (what the store begins) sends BEGIN and the
// locks in one round trip (one simple-protocol query): every write on
// PostgreSQL pays round trips, not work (docs/scale.md).
func (c conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	device, scoped := ctx.Value(deviceScope{}).(string)
	what := "the store's writer lock"
	if scoped {
		what = fmt.Sprintf("the store's writer lock shared and device %q's lock", device)
	}
	locks := lockQuery(device, scoped)
	if opts == (driver.TxOptions{}) {
		pc := c.Conn.Conn()
		tx, err := pc.BeginTx(ctx, pgx.TxOptions{BeginQuery: "BEGIN; " + locks})
		if err != nil {
			if !pc.IsClosed() && pc.PgConn().TxStatus() != 'I' {
				pc.Exec(ctx, "rollback") // a lock failed after BEGIN
			}
			return nil, fmt.Errorf("beginning a transaction with %s: %w", what, err)
		}
		return lockedTx{ctx: ctx, tx: tx}, nil
	}
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if _, err := c.Conn.Conn().Exec(ctx, locks); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("taking %s: %w", what, err)
	}
	return tx, nil
}

// lockQuery is the statements that take a transaction's locks, the
// writer lock first (the lock order BeginTx explains): exclusive, or
// shared and then the device's. Integers only: no text of the device's
// is sent.
func lockQuery(device string, scoped bool) string {
	if !scoped {
		return fmt.Sprintf("SELECT pg_advisory_xact_lock(%d)", WriterLock)
	}
	return fmt.Sprintf("SELECT pg_advisory_xact_lock_shared(%d); SELECT pg_advisory_xact_lock(%d, %d)",
		WriterLock, DeviceLockClass, DeviceLockKey(device))
}

// lockedTx is a transaction BeginTx began with its locks in one query.
type lockedTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t lockedTx) Commit() error   { return t.tx.Commit(t.ctx) }
func (t lockedTx) Rollback() error { return t.tx.Rollback(t.ctx) }
