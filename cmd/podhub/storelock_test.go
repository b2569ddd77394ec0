package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Two podhub serve with different data directories on one SQLite file
// (store: /path/fleet.db): the second is refused at once, naming the
// file and the pid of the one that holds it, even when that one is a
// paused leader whose replica row expired (what the lock file's flock
// stands for here: a holder that writes nothing to the database).
func TestSecondServeOnOneSQLiteFileRefused(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "b")
	if _, errOut, code := runCLI(t, "--data-dir", dir, "init"); code != 0 {
		t.Fatal(errOut)
	}
	store := filepath.Join(base, "fleet.db")
	// The first serve, paused: it holds the store's lock, its pid written.
	held, err := os.OpenFile(store+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	held.WriteString("4242\n")

	type result struct {
		errOut string
		code   int
	}
	done := make(chan result, 1)
	go func() {
		_, errOut, code := runCLI(t, "--data-dir", dir, "serve", "--mqtt-listen", "127.0.0.1:0", "--store", store)
		done <- result{errOut, code}
	}()
	select {
	case r := <-done:
		if r.code != 1 || !strings.Contains(r.errOut, store) || !strings.Contains(r.errOut, "pid 4242") ||
			!strings.Contains(r.errOut, store+".lock") || !strings.Contains(r.errOut, "PostgreSQL") {
			t.Fatalf("serve beside another on %s: exit %d, stderr:\n%s", store, r.code, r.errOut)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("serve on %s, whose lock another holds, still runs after 30s", store)
	}

	// Once the first is gone (its descriptor closed, as at a kill -9),
	// the lock is free; the one that takes it writes its own pid.
	held.Close()
	unlock, err := lockSQLiteStore(store)
	if err != nil {
		t.Fatalf("the store's lock once free: %v", err)
	}
	defer unlock()
	if _, err := lockSQLiteStore(store); err == nil || !strings.Contains(err.Error(), "pid "+strconv.Itoa(os.Getpid())) {
		t.Fatalf("a second lock: %v, want refused naming pid %d", err, os.Getpid())
	}
	// The same file by another path (a link to its directory): one lock.
	link := filepath.Join(t.TempDir(), "store")
	if err := os.Symlink(base, link); err != nil {
		t.Fatal(err)
	}
	if _, err := lockSQLiteStore(filepath.Join(link, "fleet.db")); err == nil {
		t.Fatal("the store's lock taken again through a link to its directory")
	}
}
