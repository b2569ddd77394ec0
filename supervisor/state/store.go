// Package state keeps podvisor's local state in one SQLite file: every pod
// instance the core knows (its spec, container records, restart counts and
// backoff) and the history of container instances.
//
// Only SQLite opens the database and its -wal and -shm files in the
// daemon: closing any descriptor of a file drops every POSIX lock the
// process holds on it, SQLite's included, and another process (an
// operator's sqlite3) would then truncate the -shm the daemon has mapped
// or checkpoint and delete its WAL.
//
// Durability: at-most-once does not rest on this database but on the
// instance locks of the process runtime, so writes use WAL with
// synchronous=NORMAL and are batched by the daemon; a power cut may lose
// the last fraction of a second of restart counts, never start a
// duplicate.
package state

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/apimachinery/pkg/types"
	_ "modernc.org/sqlite" // registers the "sqlite" driver, pure Go

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// migrations are applied in order; the index+1 is the schema version.
var migrations = []string{
	`CREATE TABLE pods (
		uid        TEXT PRIMARY KEY,
		namespace  TEXT NOT NULL,
		name       TEXT NOT NULL,
		source     TEXT NOT NULL,
		record     TEXT NOT NULL,
		updated_at INTEGER NOT NULL
	);
	CREATE TABLE container_instances (
		instance_id TEXT PRIMARY KEY,
		pod_uid     TEXT NOT NULL,
		container   TEXT NOT NULL,
		attempt     INTEGER NOT NULL,
		started_at  INTEGER,
		finished_at INTEGER,
		exit_code   INTEGER,
		reason      TEXT
	);
	CREATE INDEX container_instances_pod ON container_instances(pod_uid);`,
}

// Store is the state database. Use it from one goroutine.
type Store struct {
	path   string
	db     *sql.DB
	now    func() time.Time
	empty  bool    // no supervisor tables at open
	damage *Damage // set by OpenOrReplace
}

// WALSizeLimit is the size the WAL is cut back to when it starts over,
// above its usual size at SQLite's checkpoint of every 1000 pages (4 MiB):
// a reader that holds a long read transaction stalls the checkpoints and
// the WAL grows meanwhile; the space comes back once the reader is done.
const WALSizeLimit = 8 << 20

// DSN is how the daemon opens the state database, whichever of its stores
// opens it: one set of pragmas for the file.
func DSN(path string) string {
	return "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)" +
		"&_pragma=foreign_keys(ON)&_pragma=cache_size(-256)&_pragma=journal_size_limit(" + strconv.Itoa(WALSizeLimit) + ")"
}

// Open opens or creates the database and brings its schema up to date.
func Open(path string) (*Store, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", DSN(path))
	if err != nil {
		return nil, fmt.Errorf("state database %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	s := &Store{path: path, db: db, now: time.Now}
	var version int
	if err := db.QueryRow(`PRAGMA user_version`).Scan(&version); err != nil {
		db.Close()
		return nil, fmt.Errorf("state database %s: %w", path, err)
	}
	s.empty = version == 0
	if err := s.migrate(); err != nil {
		db.Close()
		return nil, fmt.Errorf("state database %s: %w", path, err)
	}
	return s, nil
}

func (s *Store) migrate() error {
	return sqldb.Migrate(s.db, sqldb.Schema{Name: "state", Migrations: migrations,
		Version: func(db *sql.DB) (v int, err error) {
			err = db.QueryRow(`PRAGMA user_version`).Scan(&v)
			return v, err
		},
		SetVersion: func(tx *sql.Tx, v int) error {
			_, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v))
			return err
		},
	})
}

// Close closes the database.
func (s *Store) Close() error { return s.db.Close() }

// Instances loads every recorded pod instance.
func (s *Store) Instances() ([]*lifecycle.Instance, error) {
	rows, err := s.db.Query(`SELECT uid, record FROM pods ORDER BY namespace, name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*lifecycle.Instance
	for rows.Next() {
		var uid, record string
		if err := rows.Scan(&uid, &record); err != nil {
			return nil, err
		}
		in := &lifecycle.Instance{}
		if err := json.Unmarshal([]byte(record), in); err != nil || in.Pod == nil {
			return nil, fmt.Errorf("pod record %s is corrupt: %v", uid, err)
		}
		out = append(out, in)
	}
	return out, rows.Err()
}

// Save writes changed instances and deletes forgotten ones in one
// transaction.
func (s *Store) Save(changed []*lifecycle.Instance, forgotten []types.UID) error {
	if len(changed) == 0 && len(forgotten) == 0 {
		return nil
	}
	tx, err := s.db.Begin()
	if err == nil {
		if err = s.save(tx, changed, forgotten); err != nil {
			tx.Rollback()
		} else {
			err = tx.Commit()
		}
	}
	if err != nil {
		// The instance locks, not this write, keep pods at most once:
		// the daemon logs it and supervises on (DESIGN.md §3).
		return fmt.Errorf("state database %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) save(tx *sql.Tx, changed []*lifecycle.Instance, forgotten []types.UID) error {
	now := s.now().UnixMilli()
	for _, in := range changed {
		record, err := json.Marshal(in)
		if err != nil {
			return err
		}
		source := in.Pod.Annotations["podvisor.io/source"]
		if _, err := tx.Exec(`INSERT INTO pods(uid, namespace, name, source, record, updated_at) VALUES(?,?,?,?,?,?)
			ON CONFLICT(uid) DO UPDATE SET record=excluded.record, updated_at=excluded.updated_at`,
			string(in.UID()), in.Pod.Namespace, in.Pod.Name, source, string(record), now); err != nil {
			return err
		}
		for _, c := range in.Containers {
			if err := saveContainer(tx, in, c); err != nil {
				return err
			}
		}
	}
	for _, uid := range forgotten {
		if _, err := tx.Exec(`DELETE FROM pods WHERE uid = ?`, string(uid)); err != nil {
			return err
		}
		if _, err := tx.Exec(`DELETE FROM container_instances WHERE pod_uid = ?`, string(uid)); err != nil {
			return err
		}
	}
	return nil
}

func saveContainer(tx *sql.Tx, in *lifecycle.Instance, c *lifecycle.Container) error {
	if c.InstanceID == "" {
		return nil
	}
	var started, finished, code any
	var reason any
	if !c.StartedAt.IsZero() {
		started = c.StartedAt.UnixMilli()
	}
	if t := c.Current; t != nil && t.InstanceID == c.InstanceID {
		finished, code, reason = t.FinishedAt.UnixMilli(), t.ExitCode, t.Reason
	}
	_, err := tx.Exec(`INSERT INTO container_instances(instance_id, pod_uid, container, attempt, started_at, finished_at, exit_code, reason)
		VALUES(?,?,?,?,?,?,?,?)
		ON CONFLICT(instance_id) DO UPDATE SET started_at=excluded.started_at, finished_at=excluded.finished_at,
			exit_code=excluded.exit_code, reason=excluded.reason`,
		c.InstanceID, string(in.UID()), c.Name, c.Attempt, started, finished, code, reason)
	return err
}

// ContainerInstance is one row of the container instance history.
type ContainerInstance struct {
	InstanceID string
	PodUID     string
	Container  string
	Attempt    int
	ExitCode   *int32
	Reason     string
}

// ContainerInstances returns the recorded instances of a pod, oldest first.
func (s *Store) ContainerInstances(uid types.UID) ([]ContainerInstance, error) {
	rows, err := s.db.Query(`SELECT instance_id, pod_uid, container, attempt, exit_code, COALESCE(reason, '')
		FROM container_instances WHERE pod_uid = ? ORDER BY container, attempt`, string(uid))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ContainerInstance
	for rows.Next() {
		var ci ContainerInstance
		var code sql.NullInt32
		if err := rows.Scan(&ci.InstanceID, &ci.PodUID, &ci.Container, &ci.Attempt, &code, &ci.Reason); err != nil {
			return nil, err
		}
		if code.Valid {
			ci.ExitCode = &code.Int32
		}
		out = append(out, ci)
	}
	return out, rows.Err()
}
