// Package sqldb holds what every SQLite database of podvisor and podhub
// shares: schema migrations kept in code, each set of tables with its own
// version, and a refusal to run on a database written by a newer release.
package sqldb

import (
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
}

// Migrate applies the schema's pending migrations, each in its own
// transaction with its version, and refuses a database newer than it.
func Migrate(db *sql.DB, s Schema) error {
	version, err := s.Version(db)
	if err != nil {
		return err
	}
	if version > len(s.Migrations) {
		return fmt.Errorf("%s schema version %d is newer than this podvisor (%d): %w", s.Name, version, len(s.Migrations), ErrNewerSchema)
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
		if err := tx.Commit(); err != nil {
			return err
		}
	}
	return nil
}
