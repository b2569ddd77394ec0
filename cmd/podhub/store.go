package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
)

// storeOf is the fleet store cfg names (store: of podhub.yaml or
// --store), else the data directory's fleet.db; a relative SQLite path
// is under the data directory, as podhub.yaml is.
func (c *cli) storeOf(cfg config) string {
	s := cfg.Store
	switch {
	case s == "":
		return c.path("fleet.db")
	case strings.HasPrefix(s, "sqlite:"):
		s = strings.TrimPrefix(strings.TrimPrefix(s, "sqlite:"), "//")
	case postgres.IsURL(s), strings.Contains(s, "://"):
		return s // PostgreSQL, or what OpenStore refuses with its reason
	}
	path := s
	if !filepath.IsAbs(path) {
		path = c.path(path)
	}
	return path
}

// storeName is how a store is shown: a URL without its password.
func storeName(store string) string {
	if strings.Contains(store, "://") {
		return postgres.Mask(store)
	}
	return store
}

// openFleet opens the fleet store cfg names. An SQLite file is created
// private: it holds every device's desired pods, secrets included.
func (c *cli) openFleet(cfg config) (*fleetdb.Fleet, error) {
	store := c.storeOf(cfg)
	if strings.Contains(store, "://") {
		return fleetdb.OpenStore(store) // its errors mask the password
	}
	f, err := os.OpenFile(store, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fleet database: %w", err)
	}
	f.Close()
	for _, p := range []string{store, store + "-wal", store + "-shm", store + "-journal"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("fleet database: %w", err)
		}
	}
	return fleetdb.Open(store)
}

// lockStore takes the SQLite store's lock for podhub serve, held until
// the returned function runs (or the process exits): an exclusive flock
// on <fleet.db>.lock beside the file, which this process's pid is
// written to. The data directory's lock (lockInstance) cannot see a
// second serve with another data directory on the same file (store:
// /path/fleet.db), and the replica rows cannot see a paused one: a
// leader stopped (SIGSTOP, a frozen VM) long enough for its row to
// expire would resume beside its successor. The flock is held while
// paused, and released by the kernel when the process dies. A
// PostgreSQL store needs none (its replicas elect a leader).
func (c *cli) lockStore(cfg config) (unlock func(), err error) {
	store := c.storeOf(cfg)
	if strings.Contains(store, "://") {
		return func() {}, nil
	}
	return lockSQLiteStore(store)
}

// lockSQLiteStore takes the lock of the SQLite store at path, beside
// the file its links lead to (two paths to one file share one lock).
func lockSQLiteStore(path string) (func(), error) {
	real := path
	if dir, err := filepath.EvalSymlinks(filepath.Dir(path)); err == nil {
		real = filepath.Join(dir, filepath.Base(path))
	}
	if target, err := filepath.EvalSymlinks(path); err == nil {
		real = target
	}
	lockPath := real + ".lock"
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("fleet store lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		defer f.Close()
		if !errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("fleet store lock %s: %w", lockPath, err)
		}
		holder := "a process that did not say its pid"
		b := make([]byte, 32)
		if n, _ := f.ReadAt(b, 0); n > 0 {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil && pid > 0 {
				holder = "pid " + strconv.Itoa(pid)
			}
		}
		return nil, &storeHeldError{path: path, holder: holder, lockPath: lockPath}
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() { f.Close() }, nil
}

// storeHeldError is an SQLite store whose lock another process holds.
type storeHeldError struct {
	path     string
	holder   string // "pid N", or that it did not say
	lockPath string
}

func (e *storeHeldError) Error() string {
	return fmt.Sprintf("fleet store %s: another podhub serve (%s) runs on this SQLite file (it holds %s); "+
		"SQLite takes one podhub at a time: several replicas need PostgreSQL (store: postgres://…)", e.path, e.holder, e.lockPath)
}
