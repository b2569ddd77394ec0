package sqldb

import "testing"

func TestRebind(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`SELECT 1`, `SELECT 1`},
		{`SELECT a FROM t WHERE x = ? AND y = ?`, `SELECT a FROM t WHERE x = $1 AND y = $2`},
		{`SELECT '?', "a?b", ? -- what?` + "\n" + `, ?`, `SELECT '?', "a?b", $1 -- what?` + "\n" + `, $2`},
		{`SELECT 'it''s ?', ? /* ? */ , ?`, `SELECT 'it''s ?', $1 /* ? */ , $2`},
		{`INSERT INTO t VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, `INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`},
		{`SELECT '?`, `SELECT '?`}, // unterminated: left as it is, the server says what is wrong
		{`SELECT ? -- end`, `SELECT $1 -- end`},
		{`UPDATE t SET x = CASE WHEN x > ?1 THEN x ELSE ?1 END WHERE id = ?2`, `UPDATE t SET x = CASE WHEN x > $1 THEN x ELSE $1 END WHERE id = $2`},
		{`SELECT ?2, ?, ?1, ?`, `SELECT $2, $3, $1, $4`},
	} {
		if got := Rebind(c.in); got != c.want {
			t.Errorf("Rebind(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestPick(t *testing.T) {
	if SQLite.Pick("a", "b") != "a" || Postgres.Pick("a", "b") != "b" {
		t.Fatal("Pick chose the wrong text")
	}
	if SQLite.String() != "sqlite" || Postgres.String() != "postgres" {
		t.Fatal("dialect names")
	}
}
