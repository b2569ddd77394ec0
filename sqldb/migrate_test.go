package sqldb

import (
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

func userVersionSchema(migrations []string, additive map[int]bool) Schema {
	return Schema{Name: "state", Migrations: migrations, Additive: additive,
		Version: func(db *sql.DB) (v int, err error) {
			err = db.QueryRow(`PRAGMA user_version`).Scan(&v)
			return v, err
		},
		SetVersion: func(tx *sql.Tx, v int) error {
			_, err := tx.Exec(fmt.Sprintf(`PRAGMA user_version = %d`, v))
			return err
		}}
}

// A release rolled back to after a newer one migrated the database runs
// on it when the newer migrations were only additive, and is refused
// (ErrNewerSchema) when one was not: the self-update's rollback depends
// on the first, and the second must never run on what it cannot read.
func TestMigrateOlderReleaseOnNewerDatabase(t *testing.T) {
	v1 := []string{`CREATE TABLE pods (uid TEXT PRIMARY KEY)`, `ALTER TABLE pods ADD COLUMN name TEXT`}
	for _, c := range []struct {
		name     string
		newer    []string
		additive map[int]bool
		wantErr  bool
	}{
		{"additive", []string{`CREATE TABLE leases (uid TEXT)`, `ALTER TABLE pods ADD COLUMN zone TEXT DEFAULT ''`}, map[int]bool{3: true, 4: true}, false},
		{"one breaking", []string{`CREATE TABLE leases (uid TEXT)`, `ALTER TABLE pods DROP COLUMN name`}, map[int]bool{3: true}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "t.db"))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			db.SetMaxOpenConns(1)
			if err := Migrate(db, userVersionSchema(v1, nil)); err != nil {
				t.Fatal(err)
			}
			if err := Migrate(db, userVersionSchema(append(v1, c.newer...), c.additive)); err != nil {
				t.Fatal(err)
			}
			err = Migrate(db, userVersionSchema(v1, nil))
			if c.wantErr != (err != nil) || err != nil && !errors.Is(err, ErrNewerSchema) {
				t.Fatalf("the older release on the newer database: err = %v, want refused: %v", err, c.wantErr)
			}
			// The newer release, back again, finds its migrations applied.
			if err := Migrate(db, userVersionSchema(append(v1, c.newer...), c.additive)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A database written before floors were kept has its version as its
// floor: an older release refuses it, as it always did.
func TestMigrateWithoutFloorRefusesOlder(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE a (x INTEGER); PRAGMA user_version = 2`); err != nil {
		t.Fatal(err)
	}
	if err := Migrate(db, userVersionSchema([]string{`CREATE TABLE a (x INTEGER)`}, nil)); !errors.Is(err, ErrNewerSchema) {
		t.Fatalf("err = %v, want ErrNewerSchema", err)
	}
}
