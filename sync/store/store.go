// Package store keeps what a device must not lose while its hub is out of
// reach, in the device's SQLite state database: the last desired document
// it accepted, and the outbox of statuses and events for the hub.
//
// The outbox keeps one row per pod (the newest status: an older one is
// replaced, since only the latest matters) and events in order. It is
// bounded by rows and bytes; when full it drops the oldest events first,
// and never a pod's newest status (pods are few: at most maxPods).
package store

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	_ "modernc.org/sqlite" // the database/sql driver

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/supervisor/state"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Its tables live beside the supervisor's in state.db with a schema
// version of their own (user_version belongs to the supervisor's store).
var migrations = []string{
	`CREATE TABLE hub_desired (
		id         INTEGER PRIMARY KEY CHECK (id = 1),
		generation INTEGER NOT NULL,
		document   BLOB NOT NULL,
		results    BLOB NOT NULL
	);
	CREATE TABLE outbox (
		seq     INTEGER PRIMARY KEY AUTOINCREMENT,
		key     TEXT NOT NULL,
		kind    TEXT NOT NULL,
		payload BLOB NOT NULL
	);
	CREATE INDEX outbox_key ON outbox(key, kind);
	CREATE TABLE outbox_meta (
		id    INTEGER PRIMARY KEY CHECK (id = 1),
		epoch TEXT NOT NULL,
		acked INTEGER NOT NULL DEFAULT 0,
		dropped INTEGER NOT NULL DEFAULT 0
	);`,
	// Sequence numbers on the wire are dense: wseq is given to a row when
	// it is first sent, so the hub can take any jump for a forgery or a
	// gap. The old numbering meant nothing on the wire any more: a new
	// epoch starts.
	`ALTER TABLE outbox ADD COLUMN wseq INTEGER;
	CREATE UNIQUE INDEX outbox_wseq ON outbox(wseq);
	ALTER TABLE outbox_meta ADD COLUMN assigned INTEGER NOT NULL DEFAULT 0;
	UPDATE outbox_meta SET epoch = lower(hex(randomblob(8))), acked = 0, assigned = 0;`,
	// The hub's ConfigMaps and Secrets (objects.go): tables an older
	// release never reads.
	`CREATE TABLE hub_object_index (
		id         INTEGER PRIMARY KEY CHECK (id = 1),
		generation INTEGER NOT NULL,
		document   BLOB NOT NULL
	);
	CREATE TABLE hub_objects (
		key     TEXT PRIMARY KEY,
		message BLOB NOT NULL
	);`,
}

// additive are the migrations an older release runs beside (sqldb.Schema).
var additive = map[int]bool{3: true}

// Kinds of outbox row.
const (
	KindPod   = "pod"
	KindEvent = "event"
)

// Limits bound the outbox.
type Limits struct {
	Rows  int
	Bytes int64
}

// DefaultLimits hold a day of events of a busy device in a few MiB.
var DefaultLimits = Limits{Rows: 10000, Bytes: 8 << 20}

// Store is the device's hub state. Its methods may be called from several
// goroutines: database/sql serialises them on the one connection.
type Store struct {
	db     *sql.DB
	dir    string
	limits Limits

	mu    sync.Mutex
	epoch string

	// stmts are the outbox's hot queries, prepared on first use: the
	// driver parses a query's text at every Exec, a third of the cost of
	// numbering a batch.
	stmts *sqldb.Stmts

	// adding serialises Add with what it knows of the outbox's size:
	// at most size (rows, bytes), known once counted. Only Add grows the
	// outbox, so the bound holds until the next Add; the table is
	// counted (a scan) only when the bound reaches the limits, not at
	// every Add.
	adding sync.Mutex
	size   struct {
		known bool
		rows  int
		bytes int64
	}
}

// Open opens (creating if needed) the hub tables in the database at path.
func Open(path string, limits Limits) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", state.DSN(path)+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("hub store %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &Store{db: db, stmts: sqldb.NewStmts(db), dir: filepath.Dir(path), limits: limits}
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("hub store %s: %w", path, err)
	}
	if err := s.loadEpoch(); err != nil {
		db.Close()
		return nil, fmt.Errorf("hub store %s: %w", path, err)
	}
	// The desired document's statements are prepared now, not at the
	// first apply: the hub's first document reaches a fleet's devices at
	// once, and each would parse them then, before it acks.
	if _, err := s.prepare(qSaveDesired, qDesired); err != nil {
		s.Close()
		return nil, fmt.Errorf("hub store %s: %w", path, err)
	}
	return s, nil
}

// Close closes the database.
func (s *Store) Close() error {
	s.stmts.Close()
	return s.db.Close()
}

// prepare returns the queries prepared; it must be called before a
// transaction takes the one connection (preparing would wait for it).
func (s *Store) prepare(queries ...string) ([]*sql.Stmt, error) {
	return s.stmts.Prepare(queries...)
}

func (s *Store) migrate() error {
	if _, err := s.db.Exec(`CREATE TABLE IF NOT EXISTS sync_schema (version INTEGER NOT NULL)`); err != nil {
		return err
	}
	return sqldb.Migrate(s.db, sqldb.Schema{Name: "hub", Migrations: migrations, Additive: additive,
		Version: func(db *sql.DB) (v int, err error) {
			err = db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM sync_schema`).Scan(&v)
			return v, err
		},
		SetVersion: func(tx *sql.Tx, v int) error {
			_, err := tx.Exec(`DELETE FROM sync_schema; INSERT INTO sync_schema VALUES (?)`, v)
			return err
		},
	})
}

// loadEpoch reads, or makes, the outbox's epoch: a new database is a new
// sequence, and the hub must not take its seq 1 for a duplicate.
func (s *Store) loadEpoch() error {
	err := s.db.QueryRow(`SELECT epoch FROM outbox_meta WHERE id = 1`).Scan(&s.epoch)
	if !errors.Is(err, sql.ErrNoRows) {
		return err
	}
	s.epoch = newEpoch()
	_, err = s.db.Exec(`INSERT INTO outbox_meta (id, epoch) VALUES (1, ?)`, s.epoch)
	return err
}

func newEpoch() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// Epoch names this outbox's sequence.
func (s *Store) Epoch() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// Dir is the directory of the state database: the device keeps there,
// outside the database, what must survive the database's loss.
func (s *Store) Dir() string { return s.dir }

// DesiredRecord is the last desired document the device accepted.
type DesiredRecord struct {
	Generation int64
	Document   []byte // as received, signature included
	Results    []protocol.PodResult
}

// The desired document's queries (prepared on first use). The pragmas
// that make its write durable are not among them: SQLite applies a
// synchronous pragma when it compiles it, so a prepared one run again
// would change nothing.
const (
	qSaveDesired = `INSERT INTO hub_desired (id, generation, document, results) VALUES (1, ?, ?, ?)
		ON CONFLICT(id) DO UPDATE SET generation = excluded.generation, document = excluded.document, results = excluded.results`
	qDesired = `SELECT generation, document, results FROM hub_desired WHERE id = 1`
)

// SaveDesired stores an accepted document durably (synchronous=FULL: it
// is acknowledged to the hub once this returns) in one transaction, so a
// crash leaves either the old document or the new one.
func (s *Store) SaveDesired(r DesiredRecord) error {
	results, err := json.Marshal(r.Results)
	if err != nil {
		return err
	}
	st, err := s.prepare(qSaveDesired)
	if err != nil {
		return err
	}
	// On one connection held for the purpose: the pragma is per
	// connection, and the outbox's writes stay at NORMAL.
	ctx := context.Background()
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA synchronous = FULL`); err != nil {
		return err
	}
	defer conn.ExecContext(ctx, `PRAGMA synchronous = NORMAL`)
	// The statement prepared on the database runs on this connection
	// (its only one) inside a transaction of it.
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if _, err := tx.Stmt(st[0]).Exec(r.Generation, r.Document, results); err != nil {
		return fmt.Errorf("saving desired generation %d: %w", r.Generation, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("saving desired generation %d: %w", r.Generation, err)
	}
	return nil
}

// Desired returns the stored document; ok is false when there is none.
func (s *Store) Desired() (r DesiredRecord, ok bool, err error) {
	st, err := s.prepare(qDesired)
	if err != nil {
		return r, false, err
	}
	var results []byte
	err = st[0].QueryRow().Scan(&r.Generation, &r.Document, &results)
	if errors.Is(err, sql.ErrNoRows) {
		return r, false, nil
	}
	if err != nil {
		return r, false, err
	}
	if err := json.Unmarshal(results, &r.Results); err != nil {
		return r, false, fmt.Errorf("stored desired results: %w", err)
	}
	return r, true, nil
}
