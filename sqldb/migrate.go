// Package sqldb holds what every database of podvisor and podhub shares:
// schema migrations kept in code, each set of tables with its own
// version, and a refusal to run on a database written by a newer release;
// prepared statements; the dialects (SQLite everywhere, PostgreSQL for
// the hub's fleet store: sqldb/postgres) and what differs between them.
package sqldb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// ErrNewerSchema: the database was written by a newer podvisor. It is not
// damaged, so it is refused rather than moved aside.
var ErrNewerSchema = errors.New("refusing to downgrade")

// Schema is one set of tables in the state database with its own version
// (the supervisor's keep theirs in user_version; the hub sync's in a
// table), so each part of the daemon migrates its tables alone.
type Schema struct {
	Name       string
	Migrations []string
	// Version reads the version applied; SetVersion records one, in the
	// migration's transaction.
	Version    func(db *sql.DB) (int, error)
	SetVersion func(tx *sql.Tx, v int) error
	// Additive names the migrations (by the version they bring, from 1)
	// that only add what an older release ignores: a table it never
	// reads, a column with a default that it never names. An older
	// podvisor still runs on a database they changed, which a
	// self-update's rollback needs. Every other migration raises the
	// schema's floor: the number of migrations a release must know to
	// open the database at all.
	Additive map[int]bool
	// Dialect is the database's engine (zero: SQLite); it decides how
	// the catalog is asked whether a table exists.
	Dialect Dialect
}

// The floors, by schema name, live beside the schemas' own versions.
const floorTable = `CREATE TABLE IF NOT EXISTS schema_floor (name TEXT PRIMARY KEY, floor INTEGER NOT NULL)`

// floor is the schema's floor; a database without one (written before
// floors were kept) has its version as its floor.
func (s Schema) floor(db *sql.DB, version int) (int, error) {
	var n int
	if err := db.QueryRow(s.Dialect.Pick(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'schema_floor'`,
		`SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = 'schema_floor'`)).Scan(&n); err != nil || n == 0 {
		return version, err
	}
	var floor int
	err := db.QueryRow(`SELECT floor FROM schema_floor WHERE name = ?`, s.Name).Scan(&floor)
	if errors.Is(err, sql.ErrNoRows) {
		return version, nil
	}
	return floor, err
}

// MigrateLock is the session-level advisory lock key Migrate holds on
// PostgreSQL (distinct from the store's writer lock, sqldb/postgres).
const MigrateLock int64 = 0x706f646875620002 // "podhub", migrations

// Migrate applies the schema's pending migrations, each in its own
// transaction with its version, and refuses a database newer than it.
//
// On PostgreSQL, several replicas may start at once on one store: each
// would read version N and apply N+1, the second failing (an object that
// already exists; even CREATE TABLE IF NOT EXISTS races on the catalog).
// So the whole of Migrate, from the first read of the version, runs
// holding MigrateLock on a connection of its own (its wait bounded by
// the connection's lock_timeout); the others wait, then find nothing
// left to do.
func Migrate(db *sql.DB, s Schema) error {
	if s.Dialect == Postgres {
		ctx := context.Background()
		conn, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, MigrateLock); err != nil {
			return fmt.Errorf("%s schema: taking the migration lock: %w", s.Name, err)
		}
		// Unlocked before the connection goes back to the pool (closing
		// the session would unlock it too).
		defer conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, MigrateLock)
	}
	return migrate(db, s)
}

func migrate(db *sql.DB, s Schema) error {
	version, err := s.Version(db)
	if err != nil {
		return err
	}
	if version > len(s.Migrations) {
		floor, err := s.floor(db, version)
		if err != nil {
			return err
		}
		if floor <= len(s.Migrations) {
			return nil // a newer release only added what this one ignores
		}
		return fmt.Errorf("%s schema version %d is newer than this podvisor (%d; it needs %d): %w", s.Name, version, len(s.Migrations), floor, ErrNewerSchema)
	}
	for v := version; v < len(s.Migrations); v++ {
		tx, err := db.Begin()
		if err != nil {
			return err
		}
		if _, err := tx.Exec(s.Migrations[v]); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s migration %d: %w", s.Name, v+1, err)
		}
		if err := s.SetVersion(tx, v+1); err != nil {
			tx.Rollback()
			return err
		}
		if !s.Additive[v+1] {
			if _, err := tx.Exec(floorTable); err != nil {
				tx.Rollback()
				return err
			}
			if _, err := tx.Exec(`INSERT INTO schema_floor (name, floor) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET floor = excluded.floor`, s.Name, v+1); err != nil {
				tx.Rollback()
				return err
			}
		}
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}
