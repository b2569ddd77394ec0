package postgres

import (
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestMask(t *testing.T) {
	for in, want := range map[string]string{
		"postgres://u:secret@h:5432/db?sslmode=require": "postgres://u:xxxxx@h:5432/db?sslmode=require",
		"postgresql://u@h/db?password=secret":           "postgresql://u@h/db?password=xxxxx",
		"postgres://h/db":                               "postgres://h/db",
		"postgres://u:secret@h/db\x7f":                  "postgres://(a URL that does not parse)",
	} {
		if got := Mask(in); got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
	}
	// %-escaped passwords, in the user information and in parameters
	// (however the key is written, and one url.Query cannot decode).
	for in, want := range map[string]string{
		"postgres://u:p%40ss%3Aw%25rd@h/db":                       "postgres://u:xxxxx@h/db",
		"postgres://u@h/db?password=se%20cr%2Bet&sslmode=require": "postgres://u@h/db?password=xxxxx&sslmode=require",
		"postgres://u@h/db?sslmode=require&password=se%zzcret":    "postgres://u@h/db?sslmode=require&password=xxxxx",
		"postgres://u@h/db?pass%77ord=secret":                     "postgres://u@h/db?pass%77ord=xxxxx",
		"postgres://u@h/db?sslpassword=keysecret&sslkey=/k.pem":   "postgres://u@h/db?sslpassword=xxxxx&sslkey=/k.pem",
		"postgres://u@h/db?PASSWORD=secret;x":                     "postgres://u@h/db?PASSWORD=xxxxx",
	} {
		got := Mask(in)
		if got != want {
			t.Errorf("Mask(%q) = %q, want %q", in, got, want)
		}
		for _, secret := range []string{"p%40ss", "p@ss", "se%20cr", "se cr", "se%zz", "secret", "keysecret"} {
			if strings.Contains(got, secret) {
				t.Errorf("Mask(%q) = %q shows %q", in, got, secret)
			}
		}
	}
	if !IsURL("postgres://h/db") || !IsURL("postgresql://h/db") || IsURL("/var/lib/podhub/fleet.db") || IsURL("sqlite:x.db") {
		t.Error("IsURL")
	}
}

// A password the server refuses is not in the error; the store's URL is,
// masked.
func TestOpenErrorsNeverCarryThePassword(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(u.User.Username(), "Wr0ngPassw0rd")
	_, err = Open(u.String())
	if err == nil || strings.Contains(err.Error(), "Wr0ngPassw0rd") || !strings.Contains(err.Error(), "xxxxx") || !strings.Contains(err.Error(), "password authentication failed") {
		t.Fatalf("wrong password: %v", err)
	}
	_, err = Open("postgres://podhub:Wr0ngPassw0rd@127.0.0.1:5432/db?sslmode=bogus")
	if err == nil || strings.Contains(err.Error(), "Wr0ngPassw0rd") {
		t.Fatalf("a URL that does not parse: %v", err)
	}
}

// An error quoting a %-escaped password, as written or decoded, shows
// neither: for each of the URL's passwords, even when it does not parse.
func TestScrubEscapedPasswords(t *testing.T) {
	for _, c := range []struct {
		url     string
		secrets []string
	}{
		{"postgres://u:p%40ss%2Bw%20d@h/db", []string{"p%40ss%2Bw%20d", "p@ss+w d"}},
		{"postgres://u@h/db?password=p%40ss+w%2Bd", []string{"p%40ss+w%2Bd", "p@ss+w+d", "p@ss w+d"}},
		{"postgres://u@h/db?sslpassword=k%25ey", []string{"k%25ey", "k%ey"}},
		{"postgres://u:p%zzss@h/db", []string{"p%zzss"}}, // does not parse
	} {
		msg := "failed: " + strings.Join(c.secrets, " and ")
		got := scrub(errors.New(msg), passwordsOf(c.url)...).Error()
		for _, s := range c.secrets {
			if strings.Contains(got, s) {
				t.Errorf("%s: scrubbed %q to %q, which shows %q", c.url, msg, got, s)
			}
		}
	}
	// Through Open: a URL pgx refuses (before any connection).
	for _, u := range []string{
		"postgres://podhub:Wr0ng%25Pa%24%24@127.0.0.1:1/db?sslmode=bogus",
		"postgres://podhub@127.0.0.1:1/db?sslmode=bogus&password=Wr0ng%25Pa%24%24",
	} {
		_, err := Open(u)
		if err == nil {
			t.Fatalf("Open(%s) succeeded", u)
		}
		for _, s := range []string{"Wr0ng%25Pa%24%24", "Wr0ng%Pa$$"} {
			if strings.Contains(err.Error(), s) {
				t.Errorf("Open's error %q shows %q", err, s)
			}
		}
	}
}

// The connection speaks the SQLite store's SQL: ? placeholders, numbered
// ones, booleans as 0/1; every transaction holds the writer lock.
func TestConnectionSpeaksTheStoreSQL(t *testing.T) {
	db, err := Open(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`CREATE TABLE t (id TEXT PRIMARY KEY, flag BIGINT NOT NULL, n BIGINT NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO t (id, flag, n) VALUES (?, ?, ?)`, "a", true, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`UPDATE t SET n = CASE WHEN n > ?1 THEN n ELSE ?1 END WHERE id = ?2`, 9, "a"); err != nil {
		t.Fatal(err)
	}
	var flag bool
	var n int64
	if err := db.QueryRow(`SELECT flag, n FROM t WHERE id = ? AND '?' = '?'`, "a").Scan(&flag, &n); err != nil || !flag || n != 9 {
		t.Fatalf("read back flag %v n %d: %v", flag, n, err)
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var held int
	if err := tx.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted`).Scan(&held); err != nil || held != 1 {
		t.Fatalf("the transaction holds %d advisory locks (%v), want the writer lock", held, err)
	}
}

// The password can stay out of the URL: passfile= names a password
// file (as PGPASSFILE or ~/.pgpass would), the way docs/hub.md says to.
func TestPassfile(t *testing.T) {
	u, err := url.Parse(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	password, _ := u.User.Password()
	passfile := filepath.Join(t.TempDir(), "pgpass")
	line := u.Hostname() + ":" + u.Port() + ":" + strings.TrimPrefix(u.Path, "/") + ":" + u.User.Username() + ":" + password + "\n"
	if err := os.WriteFile(passfile, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	u.User = url.User(u.User.Username())
	if db, err := Open(u.String()); err == nil {
		db.Close()
		t.Fatal("the server took no password: the test proves nothing")
	}
	q := u.Query()
	q.Set("passfile", passfile)
	u.RawQuery = q.Encode()
	db, err := Open(u.String())
	if err != nil {
		t.Fatalf("with passfile=: %v", err)
	}
	db.Close()
}

// A transaction that cannot have the writer lock within lock_timeout
// fails as it begins and leaves no connection inside a transaction; a
// transaction whose statement failed does not commit.
func TestWriterLockTimeoutAndFailedCommit(t *testing.T) {
	store := pgtest.URL(t)
	holder, err := Open(store)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := Open(store + "&lock_timeout=200ms")
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	waiter.SetMaxOpenConns(1) // the failed begin's connection is the next one's
	held, err := holder.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.Begin(); err == nil || !strings.Contains(err.Error(), "lock timeout") {
		t.Fatalf("a second writer while the lock is held: %v, want a lock timeout", err)
	}
	held.Rollback()
	tx, err := waiter.Begin()
	if err != nil {
		t.Fatalf("after the lock was released: %v", err)
	}
	if _, err := tx.Exec(`CREATE TABLE t (id BIGINT PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`INSERT INTO t (id) VALUES (1), (1)`); err == nil {
		t.Fatal("a duplicate key was inserted")
	}
	if err := tx.Commit(); err == nil {
		t.Fatal("a transaction whose statement failed committed")
	}
	var n int
	if err := waiter.QueryRow(`SELECT count(*) FROM pg_tables WHERE tablename = 't'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after the failed commit: %d tables t (%v), want none", n, err)
	}
}
