package replica

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/podvisor/podvisor/sqldb"
)

// Tables are the replicas' tables on SQLite (a migration of the fleet
// database: fleetdb lists it); PGTables the same on PostgreSQL. Times
// are the database's clock in milliseconds since the epoch.
const (
	Tables = `CREATE TABLE replicas (
	id        TEXT PRIMARY KEY,
	address   TEXT NOT NULL DEFAULT '',
	version   TEXT NOT NULL DEFAULT '',
	started   INTEGER NOT NULL,
	heartbeat INTEGER NOT NULL,
	expires   INTEGER NOT NULL
);
CREATE TABLE leases (
	name    TEXT PRIMARY KEY,
	holder  TEXT NOT NULL,
	token   INTEGER NOT NULL,
	expires INTEGER NOT NULL
);
`
	PGTables = `CREATE TABLE replicas (
	id        TEXT COLLATE "C" PRIMARY KEY,
	address   TEXT NOT NULL DEFAULT '',
	version   TEXT NOT NULL DEFAULT '',
	started   BIGINT NOT NULL,
	heartbeat BIGINT NOT NULL,
	expires   BIGINT NOT NULL
);
CREATE TABLE leases (
	name    TEXT COLLATE "C" PRIMARY KEY,
	holder  TEXT COLLATE "C" NOT NULL,
	token   BIGINT NOT NULL,
	expires BIGINT NOT NULL
);
`
)

// Nonces is the migration (after Tables) that gives the replicas' rows
// and the lease their process's nonce (Self) on SQLite; PGNonces the
// same on PostgreSQL. Rows from before it have none (”).
const (
	Nonces = `ALTER TABLE replicas ADD COLUMN nonce TEXT NOT NULL DEFAULT '';
ALTER TABLE leases ADD COLUMN nonce TEXT NOT NULL DEFAULT '';
`
	PGNonces = `ALTER TABLE replicas ADD COLUMN nonce TEXT COLLATE "C" NOT NULL DEFAULT '';
ALTER TABLE leases ADD COLUMN nonce TEXT COLLATE "C" NOT NULL DEFAULT '';
`
)

// ErrIDInUse is a replica refused because another live podhub process
// runs with its ID.
var ErrIDInUse = errors.New("another live podhub process runs with this replica ID")

// ErrDeposed is a fenced write refused: the lease's token moved since
// the writer's term began (another replica leads, or has led).
var ErrDeposed = errors.New("fenced write refused: this replica no longer holds the leader lease (another replica leads)")

// Store is the replicas' tables in the fleet store. Every statement but
// Fence's runs on its own (autocommit), outside the store's writer lock
// (sqldb/postgres): a renewal never waits behind a long fleet write.
type Store struct {
	db  *sqldb.DB
	now string // the database's clock, in milliseconds since the epoch
	// timeout bounds each statement: a store that hangs fails the
	// round, and the leader's term runs out on its own clock.
	timeout time.Duration
}

// DefaultStatementTimeout bounds each of the store's statements.
const DefaultStatementTimeout = 5 * time.Second

// SetTimeout bounds each statement by d (DefaultStatementTimeout
// unless set).
func (s *Store) SetTimeout(d time.Duration) { s.timeout = d }

func (s *Store) exec(query string, args ...any) (sql.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	return s.db.ExecContext(ctx, query, args...)
}

// queryRow scans the one row query returns into dest.
func (s *Store) queryRow(query string, args []any, dest ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	return s.db.QueryRowContext(ctx, query, args...).Scan(dest...)
}

// NewStore is the replicas' tables of the fleet store db (fleetdb
// migrates them: Fleet.SQL).
func NewStore(db *sqldb.DB) *Store {
	return &Store{db: db, timeout: DefaultStatementTimeout, now: db.Dialect.Pick(
		`CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`,
		`CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)`)}
}

// Dialect is the store's SQL engine.
func (s *Store) Dialect() sqldb.Dialect { return s.db.Dialect }

// Now is the database's clock (milliseconds since the epoch).
func (s *Store) Now() (int64, error) {
	var now int64
	err := s.queryRow(`SELECT `+s.now, nil, &now)
	return now, err
}

// ReadLease is the lease row name (nil: none) and the database's time
// of the read.
func (s *Store) ReadLease(name string) (*Lease, int64, error) {
	var holder, nonce sql.NullString
	var token, expires sql.NullInt64
	var now int64
	err := s.queryRow(`SELECT l.holder, l.nonce, l.token, l.expires, n.now FROM (SELECT `+s.now+` AS now) n
		LEFT JOIN leases l ON l.name = ?`, []any{name}, &holder, &nonce, &token, &expires, &now)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the %s lease: %w", name, err)
	}
	if !holder.Valid {
		return nil, now, nil
	}
	return &Lease{Name: name, Holder: holder.String, Nonce: nonce.String, Token: token.Int64, Expires: expires.Int64}, now, nil
}

// WriteLease writes d's outcome of the lease row read (nil: none) as
// me's, valid ttl from the database's now, if the row is still as read
// (compare-and-set on holder, nonce, token and expiry: a renewal or take
// by another between the read and the write wins, and this one reports
// false).
func (s *Store) WriteLease(name string, me Self, read *Lease, d Decision, ttl time.Duration) (bool, error) {
	var res sql.Result
	var err error
	switch d.Action {
	case Wait:
		return false, nil
	case Create:
		res, err = s.exec(`INSERT INTO leases (name, holder, nonce, token, expires) VALUES (?, ?, ?, ?, `+s.now+` + ?)
			ON CONFLICT (name) DO NOTHING`, name, me.ID, me.Nonce, d.Token, ttl.Milliseconds())
	default:
		if read == nil {
			return false, fmt.Errorf("%s the %s lease: no row read", d.Action, name)
		}
		res, err = s.exec(`UPDATE leases SET holder = ?, nonce = ?, token = ?, expires = `+s.now+` + ?
			WHERE name = ? AND holder = ? AND nonce = ? AND token = ? AND expires = ?`,
			me.ID, me.Nonce, d.Token, ttl.Milliseconds(), name, read.Holder, read.Nonce, read.Token, read.Expires)
	}
	if err != nil {
		return false, fmt.Errorf("%s the %s lease: %w", d.Action, name, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Release gives the lease up, if me still holds it with token: another
// replica takes it at its next look, without waiting for the expiry.
// The token stays: the next holder's is one more.
func (s *Store) Release(name string, me Self, token int64) (bool, error) {
	res, err := s.exec(`UPDATE leases SET holder = '', nonce = '', expires = `+s.now+` WHERE name = ? AND holder = ? AND nonce = ? AND token = ?`,
		name, me.ID, me.Nonce, token)
	if err != nil {
		return false, fmt.Errorf("releasing the %s lease: %w", name, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Fence checks, in the write's own transaction tx, that me still holds
// the lease name with token: ErrDeposed if not. On PostgreSQL the row is
// locked (FOR SHARE) until tx ends, so a take waits for the write and
// follows it; on SQLite the transaction runs alone anyway.
func (s *Store) Fence(tx *sql.Tx, name string, me Self, token int64) error {
	var l Lease
	err := tx.QueryRow(s.db.Dialect.Pick(
		`SELECT holder, nonce, token FROM leases WHERE name = ?`,
		`SELECT holder, nonce, token FROM leases WHERE name = ? FOR SHARE`), name).Scan(&l.Holder, &l.Nonce, &l.Token)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w (no %s lease)", ErrDeposed, name)
	}
	if err != nil {
		return fmt.Errorf("reading the %s lease: %w", name, err)
	}
	if !FenceHolds(me, token, &l) {
		if l.Holder == me.ID && l.Token == token {
			return fmt.Errorf("%w (token %d held by another process with replica ID %q)", ErrDeposed, token, l.Holder)
		}
		return fmt.Errorf("%w (token %d, the lease's %d, held by %q)", ErrDeposed, token, l.Token, l.Holder)
	}
	return nil
}

// Join writes m's row as starting now (a replica coming up, or back up
// under the same ID), alive for ttl; ErrIDInUse if a live row of its ID
// has another nonce (another process), which it leaves as it is, unless
// it is stale: the row read, unchanged since (its nonce and heartbeat),
// of a process taken for dead (Silent).
func (s *Store) Join(m Member, ttl time.Duration, stale *Member) error {
	staleNonce, staleBeat := "", int64(-1)
	if stale != nil {
		staleNonce, staleBeat = stale.Nonce, stale.Heartbeat
	}
	res, err := s.exec(`INSERT INTO replicas (id, nonce, address, version, started, heartbeat, expires)
		VALUES (?, ?, ?, ?, `+s.now+`, `+s.now+`, `+s.now+` + ?)
		ON CONFLICT (id) DO UPDATE SET nonce = excluded.nonce, address = excluded.address, version = excluded.version,
			started = excluded.started, heartbeat = excluded.heartbeat, expires = excluded.expires
		WHERE replicas.nonce = excluded.nonce OR replicas.expires <= excluded.started
			OR (replicas.nonce = ? AND replicas.heartbeat = ?)`,
		m.ID, m.Nonce, m.Address, m.Version, ttl.Milliseconds(), staleNonce, staleBeat)
	if err != nil {
		return fmt.Errorf("replica %s: joining: %w", m.ID, err)
	}
	if n, err := res.RowsAffected(); err != nil {
		return fmt.Errorf("replica %s: joining: %w", m.ID, err)
	} else if n == 0 {
		return fmt.Errorf("replica %s: %w", m.ID, ErrIDInUse)
	}
	return nil
}

// Heartbeat says replica process me is alive for ttl more; false if its
// row is gone (pruned: it was taken for dead) or another process's, for
// the caller to Join again.
func (s *Store) Heartbeat(me Self, ttl time.Duration) (bool, error) {
	res, err := s.exec(`UPDATE replicas SET heartbeat = `+s.now+`, expires = `+s.now+` + ? WHERE id = ? AND nonce = ?`, ttl.Milliseconds(), me.ID, me.Nonce)
	if err != nil {
		return false, fmt.Errorf("replica %s: heartbeat: %w", me.ID, err)
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// Leave removes replica process me's row (a graceful stop), not
// another process's of the same ID.
func (s *Store) Leave(me Self) error {
	_, err := s.exec(`DELETE FROM replicas WHERE id = ? AND nonce = ?`, me.ID, me.Nonce)
	return err
}

// Prune removes the rows of replicas dead for longer than after.
func (s *Store) Prune(after time.Duration) error {
	_, err := s.exec(`DELETE FROM replicas WHERE expires < `+s.now+` - ?`, after.Milliseconds())
	return err
}

// Members are the replicas' rows, by ID, and the database's time of the
// read.
func (s *Store) Members() ([]Member, int64, error) {
	now, err := s.Now()
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, `SELECT id, nonce, address, version, started, heartbeat, expires FROM replicas ORDER BY id`)
	if err != nil {
		return nil, 0, err
	}
	defer rows.Close()
	var out []Member
	for rows.Next() {
		var m Member
		if err := rows.Scan(&m.ID, &m.Nonce, &m.Address, &m.Version, &m.Started, &m.Heartbeat, &m.Expires); err != nil {
			return nil, 0, err
		}
		out = append(out, m)
	}
	return out, now, rows.Err()
}

// Info is one replica as podhub get replicas shows it: its times on
// the database's clock.
type Info struct {
	ID        string    `json:"id"`
	Address   string    `json:"address,omitempty"`
	Version   string    `json:"version,omitempty"`
	Started   time.Time `json:"started"`
	Heartbeat time.Time `json:"heartbeat"`
	// Live says it renewed its row within its TTL.
	Live bool `json:"live"`
	// Leader says it holds the leader lease.
	Leader bool `json:"leader"`
	// Buckets is how many device buckets it holds (owners.go); Devices
	// how many of the fleet's devices fall in them (List.CountDevices).
	Buckets int    `json:"buckets"`
	Devices int    `json:"devices"`
	holder  string // its process (ID NUL nonce), as bucketHolders names it
}

// List is the replicas and the leader lease, read at Now (the
// database's clock: ages are counted from it, not from the reader's).
type List struct {
	Now      time.Time `json:"now"`
	Replicas []Info    `json:"replicas"`
	// Leader is the lease's holder while it is valid ("": none).
	Leader string `json:"leader,omitempty"`
	// Token is the lease's fencing token.
	Token int64 `json:"token"`
	// holders is each bucket's holder process (bucketHolders).
	holders [Buckets]string
}

// Replica is replica id's row in the list, if it is listed.
func (l List) Replica(id string) (Info, bool) {
	for _, r := range l.Replicas {
		if r.ID == id {
			return r, true
		}
	}
	return Info{}, false
}

// List reads the replicas and the leader lease.
func (s *Store) List() (List, error) {
	members, _, err := s.Members()
	if err != nil {
		return List{}, err
	}
	l, now, err := s.ReadLease(LeaderLease)
	if err != nil {
		return List{}, err
	}
	out := List{Now: time.UnixMilli(now).UTC(), Replicas: []Info{}}
	if l != nil {
		out.Token = l.Token
		if l.Holder != "" && now < l.Expires {
			out.Leader = l.Holder
		}
	}
	buckets, err := s.bucketHolders(members, now)
	if err != nil {
		return List{}, err
	}
	out.holders = buckets
	for _, m := range members {
		in := Info{ID: m.ID, Address: m.Address, Version: m.Version,
			Started: time.UnixMilli(m.Started).UTC(), Heartbeat: time.UnixMilli(m.Heartbeat).UTC(),
			Live: m.Live(now), Leader: out.Leader == m.ID, holder: m.ID + "\x00" + m.Nonce}
		for _, holder := range buckets {
			if holder == in.holder {
				in.Buckets++
			}
		}
		out.Replicas = append(out.Replicas, in)
	}
	return out, nil
}

// bucketHolders is each bucket's holder process (ID NUL nonce; "" for
// none). On SQLite the one live replica holds them all (no table use).
func (s *Store) bucketHolders(members []Member, now int64) ([Buckets]string, error) {
	var out [Buckets]string
	if s.db.Dialect == sqldb.SQLite {
		for _, m := range members {
			if m.Live(now) { // the one replica SQLite runs
				for b := range out {
					out[b] = m.ID + "\x00" + m.Nonce
				}
				break
			}
		}
		return out, nil
	}
	owners, _, err := s.Owners()
	if err != nil {
		return out, err
	}
	for _, o := range owners {
		if o.Bucket >= 0 && o.Bucket < Buckets {
			out[o.Bucket] = o.Holder + "\x00" + o.Nonce
		}
	}
	return out, nil
}

// CountDevices fills each replica's Devices: how many of the fleet's
// devices (ids) fall in the buckets it holds.
func (l *List) CountDevices(ids []string) {
	var per [Buckets]int
	for _, id := range ids {
		per[Bucket(id)]++
	}
	for i := range l.Replicas {
		r := &l.Replicas[i]
		r.Devices = 0
		for b, holder := range l.holders {
			if holder != "" && holder == r.holder {
				r.Devices += per[b]
			}
		}
	}
}

// OwnerTables is the device ownership table on SQLite (a migration of
// the fleet database after Nonces: fleetdb lists it); PGOwnerTables the
// same on PostgreSQL. One row per bucket held (owners.go); a bucket
// without a row is free.
const (
	OwnerTables = `CREATE TABLE device_owners (
	bucket INTEGER PRIMARY KEY,
	holder TEXT NOT NULL,
	nonce  TEXT NOT NULL,
	since  INTEGER NOT NULL
);
`
	PGOwnerTables = `CREATE TABLE device_owners (
	bucket BIGINT PRIMARY KEY,
	holder TEXT COLLATE "C" NOT NULL,
	nonce  TEXT COLLATE "C" NOT NULL,
	since  BIGINT NOT NULL
);
`
)

// Owners are the device_owners rows, by bucket, and the database's time
// of the read.
func (s *Store) Owners() ([]Owner, int64, error) {
	now, err := s.Now()
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, `SELECT bucket, holder, nonce, since FROM device_owners ORDER BY bucket`)
	if err != nil {
		return nil, 0, fmt.Errorf("reading the device owners: %w", err)
	}
	defer rows.Close()
	var out []Owner
	for rows.Next() {
		var o Owner
		var b int64
		if err := rows.Scan(&b, &o.Holder, &o.Nonce, &o.Since); err != nil {
			return nil, 0, err
		}
		o.Bucket = int(b)
		out = append(out, o)
	}
	return out, now, rows.Err()
}

// TakeBuckets takes buckets for process me, each guarded: a bucket
// read without a row only if there is still none; a row read only if it
// is still as read (holder, nonce, since) and its holder's membership
// row is still gone, another process's, or expired past margin on the
// database's clock. read is the rows read (Owners) the decision came
// from. It returns the buckets taken. The statements take up to
// takeBatch buckets each (a replica taking a dead one's share writes a
// few statements, not hundreds).
func (s *Store) TakeBuckets(me Self, buckets []int, read []Owner, margin time.Duration) ([]int, error) {
	rows := make(map[int]Owner, len(read))
	for _, o := range read {
		rows[o.Bucket] = o
	}
	var free []int
	var held []Owner
	for _, b := range buckets {
		if o, ok := rows[b]; ok {
			held = append(held, o)
		} else {
			free = append(free, b)
		}
	}
	var taken []int
	for len(free) > 0 {
		n := min(len(free), takeBatch)
		args := make([]any, 0, 3*n)
		values := make([]string, 0, n)
		for _, b := range free[:n] {
			values = append(values, `(?, ?, ?, `+s.now+`)`)
			args = append(args, b, me.ID, me.Nonce)
		}
		got, err := s.buckets(`INSERT INTO device_owners (bucket, holder, nonce, since) VALUES `+strings.Join(values, ", ")+`
			ON CONFLICT (bucket) DO NOTHING RETURNING bucket`, args)
		taken = append(taken, got...)
		if err != nil {
			return taken, fmt.Errorf("taking free device buckets: %w", err)
		}
		free = free[n:]
	}
	for len(held) > 0 {
		n := min(len(held), takeBatch)
		args := []any{me.ID, me.Nonce}
		values := make([]string, 0, n)
		for _, o := range held[:n] {
			values = append(values, `(CAST(? AS BIGINT), CAST(? AS TEXT), CAST(? AS TEXT), CAST(? AS BIGINT))`)
			args = append(args, o.Bucket, o.Holder, o.Nonce, o.Since)
		}
		args = append(args, margin.Milliseconds())
		// VALUES' columns are column1… on both SQLite and PostgreSQL.
		got, err := s.buckets(`UPDATE device_owners SET holder = ?, nonce = ?, since = `+s.now+`
			FROM (VALUES `+strings.Join(values, ", ")+`) AS r
			WHERE device_owners.bucket = r.column1 AND device_owners.holder = r.column2
				AND device_owners.nonce = r.column3 AND device_owners.since = r.column4
				AND NOT EXISTS (SELECT 1 FROM replicas m WHERE m.id = device_owners.holder AND m.nonce = device_owners.nonce
					AND m.expires + ? >= `+s.now+`)
			RETURNING device_owners.bucket`, args)
		taken = append(taken, got...)
		if err != nil {
			return taken, fmt.Errorf("taking expired device buckets: %w", err)
		}
		held = held[n:]
	}
	slices.Sort(taken)
	return taken, nil
}

// takeBatch bounds the buckets one statement of TakeBuckets takes.
const takeBatch = 256

// buckets runs query, which returns bucket numbers.
func (s *Store) buckets(query string, args []any) ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			return out, err
		}
		out = append(out, int(b))
	}
	return out, rows.Err()
}

// ReleaseBuckets gives up buckets that process me holds (rows of
// another process stay): the next round of another replica takes them.
func (s *Store) ReleaseBuckets(me Self, buckets []int) error {
	for _, b := range buckets {
		if _, err := s.exec(`DELETE FROM device_owners WHERE bucket = ? AND holder = ? AND nonce = ?`, b, me.ID, me.Nonce); err != nil {
			return fmt.Errorf("releasing device bucket %d: %w", b, err)
		}
	}
	return nil
}

// ReleaseAll gives up every bucket process me holds (a graceful stop).
func (s *Store) ReleaseAll(me Self) error {
	_, err := s.exec(`DELETE FROM device_owners WHERE holder = ? AND nonce = ?`, me.ID, me.Nonce)
	if err != nil {
		return fmt.Errorf("releasing the device buckets: %w", err)
	}
	return nil
}

// Reclaim renews the rows process me still holds after its ownership
// lapsed on its own clock (a pause, a store unreachable for a TTL): each
// row's since moves, so that a take decided on the row as read before
// fails (its compare-and-set on since), and the rows returned are the
// buckets it still holds. A take that landed first is not returned.
func (s *Store) Reclaim(me Self) ([]int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), s.timeout)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, `UPDATE device_owners
		SET since = CASE WHEN `+s.now+` > since THEN `+s.now+` ELSE since + 1 END
		WHERE holder = ? AND nonce = ? RETURNING bucket`, me.ID, me.Nonce)
	if err != nil {
		return nil, fmt.Errorf("reclaiming the device buckets: %w", err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var b int64
		if err := rows.Scan(&b); err != nil {
			return nil, err
		}
		out = append(out, int(b))
	}
	return out, rows.Err()
}

// OthersLiveLocked locks the replicas' table against joins (SHARE: a
// join's INSERT waits for tx's end) and counts the replicas other than
// me whose rows are unexpired on the database's clock: what a starting
// replica decides from inside its own transaction (fleetdb's
// ForgetPresenceAlone). PostgreSQL only.
func OthersLiveLocked(tx *sql.Tx, me string) (int64, error) {
	if _, err := tx.Exec(`LOCK TABLE replicas IN SHARE MODE`); err != nil {
		return 0, fmt.Errorf("locking the replicas' table: %w", err)
	}
	var others int64
	if err := tx.QueryRow(`SELECT count(*) FROM replicas WHERE id <> ?
		AND expires > CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)`, me).Scan(&others); err != nil {
		return 0, fmt.Errorf("reading the live replicas: %w", err)
	}
	return others, nil
}
