// Package postgres opens a PostgreSQL database for podhub's fleet store
// through pgx's database/sql driver, speaking the SQL the SQLite store's
// queries are written in: the connection rewrites their ? placeholders
// ($1, $2, …), hands booleans over as the 0/1 integers SQLite stores,
// and makes every transaction hold the store's writer lock, so that the
// fleet's read-modify-write transactions stay serialized as SQLite's
// immediate transactions on one connection keep them (see Begin below).
// Only podhub links it: the device daemon's store is SQLite alone.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
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
// takes first (pg_advisory_xact_lock): one writer at a time, as on
// SQLite, whichever connection (or, later, whichever podhub) it runs on.
const WriterLock int64 = 0x706f646875620001 // "podhub", store 1

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

// BeginTx begins a transaction holding the store's writer lock.
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
// loop (which would run such side effects twice), no deadlock can form
// around one lock, and readers outside transactions never wait. Writes
// are as serialized as they are on SQLite, no less and no more.
//
// The default transaction (what the store begins) sends BEGIN and the
// lock in one round trip (one simple-protocol query): every write on
// PostgreSQL pays round trips, not work (docs/scale.md).
func (c conn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if opts == (driver.TxOptions{}) {
		pc := c.Conn.Conn()
		tx, err := pc.BeginTx(ctx, pgx.TxOptions{BeginQuery: beginLocked})
		if err != nil {
			if !pc.IsClosed() && pc.PgConn().TxStatus() != 'I' {
				pc.Exec(ctx, "rollback") // the lock failed after BEGIN
			}
			return nil, fmt.Errorf("beginning a transaction with the store's writer lock: %w", err)
		}
		return lockedTx{ctx: ctx, tx: tx}, nil
	}
	tx, err := c.Conn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	if _, err := c.Conn.ExecContext(ctx, `SELECT pg_advisory_xact_lock($1)`, []driver.NamedValue{{Ordinal: 1, Value: WriterLock}}); err != nil {
		tx.Rollback()
		return nil, fmt.Errorf("taking the store's writer lock: %w", err)
	}
	return tx, nil
}

// beginLocked begins a transaction and takes the writer lock: two
// statements of one simple-protocol query, a round trip.
var beginLocked = fmt.Sprintf("BEGIN; SELECT pg_advisory_xact_lock(%d)", WriterLock)

// lockedTx is a transaction BeginTx began with beginLocked.
type lockedTx struct {
	ctx context.Context
	tx  pgx.Tx
}

func (t lockedTx) Commit() error   { return t.tx.Commit(t.ctx) }
func (t lockedTx) Rollback() error { return t.tx.Rollback(t.ctx) }
