package pgtest

import (
	"database/sql"
	"testing"
)

func TestMain(m *testing.M) { Main(m) }

// Two tests get two databases of the one server, each empty and theirs.
func TestFreshDatabasePerTest(t *testing.T) {
	a, b := URL(t), URL(t)
	if a == b {
		t.Fatalf("the same database twice: %s", a)
	}
	for _, u := range []string{a, b} {
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		if _, err := db.Exec(`CREATE TABLE t (x BIGINT)`); err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM t`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("%s: count %d, %v", u, n, err)
		}
	}
}
