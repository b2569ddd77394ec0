package supervisor

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/state"
)

// Making the state files private must leave SQLite's locks on them alone:
// a descriptor closed on one of them drops every POSIX lock the process
// holds on it, and an operator's sqlite3 would then truncate the -shm the
// daemon has mapped (SIGBUS) or delete the WAL it writes.
func TestTightenStateFilesKeepsSQLiteLocks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s, err := state.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Instances(); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		if err := os.Chmod(path+suffix, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The probes' own descriptors stay open until the store is closed:
	// closing them would drop the locks too.
	shm, db := openProbe(t, path+"-shm"), openProbe(t, path)
	defer shm.Close()
	defer db.Close()
	defer s.Close()

	tightenStateFiles(path, slog.New(slog.NewTextHandler(io.Discard, nil)))

	for _, suffix := range []string{"", "-wal", "-shm"} {
		if st, err := os.Stat(path + suffix); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s%s: %v %v, want 0600", path, suffix, st.Mode(), err)
		}
	}
	// The shared lock on the -shm "DMS" byte (128) says the WAL index is
	// in use; SHARED on the database (from 2^30+2, 510 bytes) is what a
	// WAL-mode connection holds while open.
	if !lockedByUs(t, shm, 128, 1) {
		t.Errorf("the -shm DMS byte is no longer locked: another process would truncate -shm under the mapping")
	}
	if !lockedByUs(t, db, 1<<30+2, 510) {
		t.Errorf("the database's SHARED lock is gone: another process's close would checkpoint and delete the WAL")
	}
}

func openProbe(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// lockedByUs asks, with an open file description lock (which conflicts
// with this process's own POSIX locks), whether this process holds a
// lock on the range.
func lockedByUs(t *testing.T, f *os.File, start, n int64) bool {
	t.Helper()
	lk := unix.Flock_t{Type: unix.F_WRLCK, Whence: io.SeekStart, Start: start, Len: n}
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
		t.Fatal(err)
	}
	return lk.Type != unix.F_UNLCK && int(lk.Pid) == os.Getpid()
}
