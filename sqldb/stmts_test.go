package sqldb

import (
	"database/sql"
	"path/filepath"
	"testing"

	_ "modernc.org/sqlite"
)

// A query is prepared once and bound to each transaction; one never
// prepared runs all the same, and is counted.
func TestStmtsPrepareOnceAndCountTheOthers(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE kv (k TEXT PRIMARY KEY, v INTEGER)`); err != nil {
		t.Fatal(err)
	}
	const insert, read = `INSERT INTO kv VALUES (?, ?)`, `SELECT v FROM kv WHERE k = ?`
	c := NewStmts(db)
	defer c.Close()
	first, err := c.Prepare(insert)
	if err != nil {
		t.Fatal(err)
	}
	again, err := c.Prepare(insert)
	if err != nil || again[0] != first[0] {
		t.Fatalf("prepared again: %v", err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(tx, insert, "a", 1); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := c.QueryRow(tx, read, []any{"a"}, &v); err != nil || v != 1 {
		t.Fatalf("read %d, %v", v, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if n := c.Unprepared(); n != 1 {
		t.Fatalf("%d queries ran unprepared, want 1 (the read)", n)
	}
	if err := c.DBQueryRow(read, []any{"a"}, &v); err != nil || v != 1 || c.Unprepared() != 2 {
		t.Fatalf("read %d, %v, %d unprepared", v, err, c.Unprepared())
	}
}
