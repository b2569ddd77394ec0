package state

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// One daemon at a time holds a data directory: a second one's lock fails
// and names the first, until the first closes it. Open takes the lock
// itself and opens the database in the directory.
func TestDirLocksThenOpens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	first := NewDir(path, log)
	if err := first.Open(); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("data directory %v (%v), want it made 0700", st, err)
	}
	if first.Store() == nil || first.DatabasePath() != filepath.Join(path, "state.db") {
		t.Fatalf("store %v at %s", first.Store(), first.DatabasePath())
	}
	if err := first.Lock(); err != nil {
		t.Fatalf("locking a held directory again: %v", err)
	}
	second := NewDir(path, log)
	err := second.Lock()
	if err == nil || !strings.Contains(err.Error(), "data directory "+path+" is in use by another podvisor: held by pid") {
		t.Fatalf("second lock: %v, want the directory in use, with its holder", err)
	}
	first.Close()
	if err := second.Open(); err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	second.Close()
}
