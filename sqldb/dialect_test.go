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
		// Dollar-quoted bodies: what is inside is not SQL.
		{`SELECT $$a ? b$$, ?`, `SELECT $$a ? b$$, $1`},
		{`DO $body$ BEGIN PERFORM '?'; END $body$; SELECT ?`, `DO $body$ BEGIN PERFORM '?'; END $body$; SELECT $1`},
		{`SELECT $a$ $$ ? $b$ ? $a$, ?`, `SELECT $a$ $$ ? $b$ ? $a$, $1`}, // only its own tag closes it
		{`SELECT $x$ ? `, `SELECT $x$ ? `},                                // unterminated: left as it is
		{`SELECT a$b$c, ?`, `SELECT a$b$c, $1`},                           // $ inside an identifier opens nothing
		{`SELECT $1, ?`, `SELECT $1, $1`},                                 // a parameter, not a tag
		// Escape strings: \' does not end them.
		{`SELECT E'it\'s ?', ?`, `SELECT E'it\'s ?', $1`},
		{`SELECT e'a\\', ?`, `SELECT e'a\\', $1`},
		{`SELECT 'a\', ?`, `SELECT 'a\', $1`}, // a backslash in a standard string escapes nothing
		// Quoted identifiers, comments: nested block comments, -- to the line's end.
		{`SELECT "we""ird?", ?`, `SELECT "we""ird?", $1`},
		{`SELECT /* a /* ? */ ? */ ?`, `SELECT /* a /* ? */ ? */ $1`},
		{"SELECT -- ?\n?", "SELECT -- ?\n$1"},
		{`SELECT /* ? `, `SELECT /* ? `},
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
