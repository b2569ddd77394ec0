// Package fleetdb is the hub's fleet database (SQLite, fleet.db, or
// PostgreSQL: OpenStore): its schema migrations, and the tables of the
// devices and what they report (devices, desired, acks, mirrors, events,
// cursors). The scheduler's
// tables (workloads, hub_pods, sched_events) are workloaddb's, the
// ConfigMaps and Secrets (config_objects) objectdb's, on the same
// database. Every query of the hub is here or there.
package fleetdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // the database/sql driver

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/protocol"
)

// fleetMigrations are the fleet database's schema versions; the first is
// the schema as it stood before versions were kept, hence IF NOT EXISTS.
var fleetMigrations = []string{fleetSchema1,
	// Device-reported labels apart from the operator's; the installation
	// instances seen under the ID; when each event was stored (retention).
	`ALTER TABLE devices ADD COLUMN device_labels BLOB NOT NULL DEFAULT '{}';
	ALTER TABLE devices ADD COLUMN instance TEXT NOT NULL DEFAULT '';
	ALTER TABLE devices ADD COLUMN prev_instance TEXT NOT NULL DEFAULT '';
	ALTER TABLE devices ADD COLUMN instance_since INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE devices ADD COLUMN duplicate_until INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE events ADD COLUMN at INTEGER NOT NULL DEFAULT 0;
	CREATE INDEX events_by_device ON events(device);`,
	// The newest heartbeat's network summary (protocol.NetSummary).
	`ALTER TABLE devices ADD COLUMN net BLOB;`,
	// Scheduling (sync/hub/schedule): workloads, the hub's pods with their
	// device, the scheduler's events (workloaddb's tables), and each
	// device's cordon and taints.
	workloaddb.Tables + `	ALTER TABLE devices ADD COLUMN unschedulable INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE devices ADD COLUMN taints BLOB NOT NULL DEFAULT '[]';`,
	// What the controllers read of a mirror, kept beside it at store time
	// (summary.go) so a pass reads no pod's JSON; the mirrors stored
	// before are summed up from theirs.
	mirrorSummaryMigration,
	// Workloads' statuses and revisions (workloaddb).
	workloaddb.RolloutTables,
	// Fencing (podhub fence device): when the device was fenced (0: it is
	// not), the pods its fence names, and the first generation that
	// carried the fence.
	`ALTER TABLE devices ADD COLUMN fenced_at INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE devices ADD COLUMN fence BLOB NOT NULL DEFAULT '[]';
	ALTER TABLE devices ADD COLUMN fence_generation INTEGER NOT NULL DEFAULT 0;`,
	// Self-update and firmware rollouts (podhub release push, podhub
	// update): releases, updates, each device's newest order and report.
	updateTables,
	// ConfigMaps and Secrets (objectdb), Secrets sealed at rest.
	objectdb.Tables,
	// Distribution of ConfigMaps and Secrets (objects.go): each device's
	// pinned sealing key, its object index, and its revocation.
	deviceObjectsTables,
	// The newest heartbeat's metrics snapshot (protocol.MetricsSnapshot).
	`ALTER TABLE devices ADD COLUMN metrics BLOB;`,
	// When the hub first knew each device (the wall clock's Unix
	// milliseconds; 0 for devices from before it was kept): a node's age.
	`ALTER TABLE devices ADD COLUMN created INTEGER NOT NULL DEFAULT 0;`,
	// Replicas: the podhub processes on the store and the leader lease
	// with its fencing token (sync/hub/replica).
	replica.Tables,
	// Each replica process's nonce, on its row and the lease's: two
	// processes given one replica ID never both lead.
	replica.Nonces,
	// Device ownership: which replica handles each bucket of devices'
	// reports (sync/hub/replica, owners.go).
	replica.OwnerTables,
}

var fleetSchema1 = `
CREATE TABLE IF NOT EXISTS devices (
	id        TEXT PRIMARY KEY,
	labels    BLOB NOT NULL DEFAULT '{}',
	online    INTEGER NOT NULL DEFAULT 0,
	last_seen INTEGER NOT NULL DEFAULT 0,
	version   TEXT NOT NULL DEFAULT '',
	node      BLOB
);
CREATE TABLE IF NOT EXISTS desired (
	device     TEXT PRIMARY KEY,
	generation INTEGER NOT NULL,
	pods       BLOB NOT NULL,
	document   BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS acks (
	device     TEXT PRIMARY KEY,
	generation INTEGER NOT NULL,
	observed   INTEGER NOT NULL,
	error      TEXT NOT NULL,
	results    BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS mirrors (
	device  TEXT NOT NULL,
	key     TEXT NOT NULL,
	seq     INTEGER NOT NULL,
	pod     BLOB NOT NULL,
	PRIMARY KEY (device, key)
);
CREATE TABLE IF NOT EXISTS events (
	device TEXT NOT NULL,
	seq    INTEGER NOT NULL,
	key    TEXT NOT NULL,
	event  BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS events_device ON events(device, seq);
CREATE TABLE IF NOT EXISTS cursors (
	device TEXT PRIMARY KEY,
	epoch  TEXT NOT NULL,
	seq    INTEGER NOT NULL
);`

// Fleet is the hub's SQLite state: devices, desired documents, the
// devices' acks, mirror pods and events, and per-device outbox cursors.
//
// Only the operator makes a device (apply, label, or enrolment): reports
// under an ID the fleet does not know are refused with ErrUnknownDevice,
// so a forged heartbeat cannot put a ghost online.
type Fleet struct {
	db *sql.DB
	// dialect is the engine's: the few queries that differ (JSON, the
	// catalog) are picked by it.
	dialect sqldb.Dialect
	// stmts are the report paths' statements (a status batch, an ack, a
	// heartbeat, a desired document), prepared at Open: compiling their
	// text at every Exec was half the hub's cost of storing a batch.
	stmts     *sqldb.Stmts
	retention Retention
	// counts are devices' mirror counts, kept by ApplyStatus (the
	// mirrors' only writer) so a batch need not count them again; on
	// SQLite only (one podhub): on PostgreSQL another replica writes them
	// too, and a batch counts them in a round trip it makes anyway.
	countsMu sync.Mutex
	counts   map[string]int
	// changes tells the fleet's readers what each write changed.
	changes fleetwatch.Feed
	// replicas carries changes between the replicas on a PostgreSQL
	// store (notify.go); nil on SQLite.
	replicas *replicas
	// leaderFence, when set, checks in the update driver's transactions
	// that its replica still leads (SetLeaderFence).
	leaderFence func(tx *sql.Tx) error
}

// Changes is the feed of what the fleet's writes change: a device's
// node, its mirror pods, its events; the workload writers publish
// fleetwatch.Workloads on it themselves. On PostgreSQL it carries the
// other replicas' changes too: the first call starts listening to them
// (and relaying what is published on it to them), until Close.
func (f *Fleet) Changes() *fleetwatch.Feed {
	f.follow()
	return &f.changes
}

// Retention bounds what the fleet keeps of each device.
type Retention struct {
	Events int           // the newest this many events are kept
	MaxAge time.Duration // and none older
	// Mirrors bounds a device's mirror pods, far above what a device
	// runs (its maxPods), so forged status items of made-up pods cannot
	// grow the database without bound; further new pods are skipped.
	Mirrors int
}

// DefaultRetention keeps a device's last thousand events of a month, and
// up to 1024 mirror pods.
var DefaultRetention = Retention{Events: 1000, MaxAge: 30 * 24 * time.Hour, Mirrors: 1024}

// ErrUnknownDevice is a report from a device the fleet has no record of.
var ErrUnknownDevice = errors.New("no such device in the fleet (devices are added by the operator: podhub apply, label or device add)")

// OpenStore opens or creates the fleet store a podhub.yaml store: names:
// a postgres:// or postgresql:// URL is a PostgreSQL database (its
// password never shown in an error: postgres.Mask), sqlite:PATH or a
// plain path an SQLite file.
func OpenStore(store string) (*Fleet, error) {
	switch {
	case postgres.IsURL(store):
		return openPostgres(store)
	case strings.HasPrefix(store, "sqlite:"):
		return Open(strings.TrimPrefix(strings.TrimPrefix(store, "sqlite:"), "//"))
	case strings.Contains(store, "://"):
		return nil, fmt.Errorf("store %s: not a store URL (postgres://…, postgresql://…, sqlite:PATH or a path)", postgres.Mask(store))
	case store == "":
		return nil, errors.New("store: empty (postgres://…, postgresql://…, sqlite:PATH or a path)")
	}
	return Open(store)
}

// openPostgres opens the fleet store on PostgreSQL and brings its schema
// to pgMigrations' last.
func openPostgres(url string) (*Fleet, error) {
	db, err := postgres.Open(url)
	if err != nil {
		return nil, err
	}
	if err := migrate(db, sqldb.Postgres, pgMigrations); err != nil {
		db.Close()
		return nil, fmt.Errorf("fleet store %s: %w", postgres.Mask(url), err)
	}
	f := &Fleet{db: db, dialect: sqldb.Postgres, stmts: sqldb.NewStmts(db), retention: DefaultRetention, replicas: newReplicas(url)}
	if _, err := f.stmts.Prepare(preparedQueries...); err != nil {
		f.Close()
		return nil, fmt.Errorf("fleet store %s: %w", postgres.Mask(url), err)
	}
	return f, nil
}

// Open opens or creates the fleet database, an SQLite file.
func Open(path string) (*Fleet, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	err = migrate(db, sqldb.SQLite, fleetMigrations)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("fleet database %s: %w", path, err)
	}
	f := &Fleet{db: db, stmts: sqldb.NewStmts(db), retention: DefaultRetention}
	if _, err := f.stmts.Prepare(preparedQueries...); err != nil {
		f.Close()
		return nil, fmt.Errorf("fleet database %s: %w", path, err)
	}
	return f, nil
}

// migrate applies the fleet database's migrations up to the last of
// migrations (the dialect's list).
func migrate(db *sql.DB, dialect sqldb.Dialect, migrations []string) error {
	return sqldb.Migrate(db, sqldb.Schema{Name: "fleet", Migrations: migrations, Dialect: dialect,
		Version: func(db *sql.DB) (v int, err error) {
			if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS fleet_schema (version INTEGER NOT NULL)`); err != nil {
				return 0, err
			}
			err = db.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM fleet_schema`).Scan(&v)
			return v, err
		},
		SetVersion: func(tx *sql.Tx, v int) error {
			if _, err := tx.Exec(`DELETE FROM fleet_schema`); err != nil {
				return err
			}
			_, err := tx.Exec(`INSERT INTO fleet_schema VALUES (?)`, v)
			return err
		},
	})
}

// SetRetention changes the bounds of stored events.
func (f *Fleet) SetRetention(r Retention) { f.retention = r }

// Close closes the database.
func (f *Fleet) Close() error {
	f.replicas.close()
	f.stmts.Close()
	return f.db.Close()
}

// SQL is the database with its dialect, for the owners of the
// scheduler's tables (workloaddb) and of the ConfigMaps and Secrets
// (objectdb), which share it (on SQLite, its one connection).
func (f *Fleet) SQL() *sqldb.DB { return &sqldb.DB{DB: f.db, Dialect: f.dialect} }

// Dialect is the store's SQL engine.
func (f *Fleet) Dialect() sqldb.Dialect { return f.dialect }

// beginDevice begins a transaction that reads and writes only device's
// rows: a report of the device's (a status batch, a heartbeat, an ack,
// its presence, an update report, an event of its own). On PostgreSQL it
// holds the writer lock shared and the device's lock (postgres.ForDevice),
// so that many devices' reports are stored at once, each device's one at
// a time, and none beside a fleet-wide transaction (f.db.Begin, which
// holds the writer lock exclusively). On SQLite it is the one immediate
// transaction, as every other.
//
// What such a transaction may do, checked for each of them: write the
// device's own rows (devices, cursors, mirrors, acks, events,
// update_states, device_objects: keyed by the device); read any row
// only fleet-wide transactions write (desired, update_orders: the
// writer lock keeps those out); append events (their rowid, an
// identity, interleaves across devices but keeps each device's order,
// which is all Events and prune read); send pg_notify (delivered in
// commit order, and a device's commits are in order under its lock).
// Nothing it reads may be another device's row that another device's
// transaction writes: no shared counter, no fleet-wide prune, no
// summary across devices (MirrorPhases and the like are readers).
func (f *Fleet) beginDevice(device string) (*sql.Tx, error) {
	return f.db.BeginTx(postgres.ForDevice(context.Background(), device), nil)
}

// touch records that a known device was heard from; ErrUnknownDevice
// for another.
func (f *Fleet) touch(tx *sql.Tx, device string, at time.Time) error {
	res, err := f.stmts.Exec(tx, qTouch, at.UnixMilli(), device)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("device %q: %w", device, ErrUnknownDevice)
	}
	return nil
}

// DesiredDoc is a device's current desired document at the hub.
type DesiredDoc struct {
	Device     string
	Generation int64
	Pods       []json.RawMessage
	Document   []byte // signed, as published
	// Fence is the fence the document carries (nil: none); stored with
	// the document, its pods are the device's fence from then on.
	Fence *protocol.Fence
}

// Desired returns a device's desired document (generation 0: none yet).
func (f *Fleet) Desired(device string) (DesiredDoc, error) {
	d := DesiredDoc{Device: device}
	var pods []byte
	err := f.stmts.DBQueryRow(qDesired, []any{device}, &d.Generation, &pods, &d.Document)
	if errors.Is(err, sql.ErrNoRows) {
		return d, nil
	}
	if err != nil {
		return d, err
	}
	return d, json.Unmarshal(pods, &d.Pods)
}

// SaveDesired stores a device's next desired document; it fails if
// another writer moved the generation meanwhile.
func (f *Fleet) SaveDesired(d DesiredDoc) error { return f.SaveDesiredAll([]DesiredDoc{d}) }

// SaveDesiredAll stores devices' next desired documents in one
// transaction: all or none (none if another writer moved a generation).
func (f *Fleet) SaveDesiredAll(docs []DesiredDoc) error {
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, d := range docs {
		pods, _ := json.Marshal(d.Pods)
		var current int64
		if err := f.stmts.QueryRow(tx, qPublished, []any{d.Device}, &current); err != nil {
			return err
		}
		if current != d.Generation-1 {
			return fmt.Errorf("device %s: generation %d is stored, cannot store %d", d.Device, current, d.Generation)
		}
		if _, err := f.stmts.Exec(tx, qUpsertDesired, d.Device, d.Generation, pods, d.Document); err != nil {
			return err
		}
		if _, err := f.stmts.Exec(tx, qAddDevice, d.Device, time.Now().UnixMilli()); err != nil {
			return err
		}
		if d.Fence != nil {
			keys, _ := json.Marshal(d.Fence.Pods)
			if _, err := tx.Exec(`UPDATE devices SET fence = ?, fence_generation = CASE WHEN fence_generation = 0 THEN ? ELSE fence_generation END
				WHERE id = ? AND fenced_at > 0`, keys, d.Generation, d.Device); err != nil {
				return err
			}
		}
	}
	devices := make([]string, len(docs))
	for i, d := range docs {
		devices[i] = d.Device
	}
	return f.commit(tx, objectsNotes(devices)...)
}

// AllDesired lists every stored desired document, to publish again.
func (f *Fleet) AllDesired() ([]DesiredDoc, error) {
	rows, err := f.db.Query(`SELECT device, generation, document FROM desired`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DesiredDoc
	for rows.Next() {
		var d DesiredDoc
		if err := rows.Scan(&d.Device, &d.Generation, &d.Document); err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// Mirror is a device's pod as last reported.
type Mirror struct {
	Key string
	Seq int64
	Pod json.RawMessage
}

// Mirrors lists a device's mirror pods.
func (f *Fleet) Mirrors(device string) ([]Mirror, error) {
	rows, err := f.db.Query(`SELECT key, seq, pod FROM mirrors WHERE device = ? ORDER BY key`, device)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Mirror
	for rows.Next() {
		var m Mirror
		if err := rows.Scan(&m.Key, &m.Seq, &m.Pod); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// LastAck is a device's last answer to its desired document, or nil.
func (f *Fleet) LastAck(device string) (*protocol.Ack, error) {
	a := &protocol.Ack{Device: device}
	var results []byte
	err := f.db.QueryRow(`SELECT generation, observed, error, results FROM acks WHERE device = ?`, device).
		Scan(&a.Generation, &a.ObservedGeneration, &a.Error, &results)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return a, json.Unmarshal(results, &a.Pods)
}

// DeviceEvent is an event of a device with the pod it is about.
type DeviceEvent struct {
	protocol.Event
	// Pod is the namespace/name of the pod the event is about; empty for
	// the hub's own events about the device (a rejected message).
	Pod string `json:"pod,omitempty"`
}

// Events lists a device's events in order; rejections of its messages
// come first.
func (f *Fleet) Events(device string) ([]DeviceEvent, error) {
	rows, err := f.db.Query(`SELECT key, event FROM events WHERE device = ? ORDER BY seq, rowid`, device)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []DeviceEvent
	for rows.Next() {
		var raw []byte
		var e DeviceEvent
		if err := rows.Scan(&e.Pod, &raw); err != nil {
			return nil, err
		}
		if err := json.Unmarshal(raw, &e.Event); err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, rows.Err()
}
