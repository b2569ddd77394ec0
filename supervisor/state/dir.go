package state

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/api"
)

// Dir is the daemon's data directory as the one daemon that uses it holds
// it: its instance lock, then its state database. The lock comes first, so
// that a second daemon fails before it touches anything the first one
// uses (the API socket, the database). Use it from one goroutine.
type Dir struct {
	path  string
	log   *slog.Logger
	lock  *os.File
	store *Store
}

// NewDir returns the data directory at path, neither locked nor open.
func NewDir(path string, log *slog.Logger) *Dir { return &Dir{path: path, log: log} }

// DatabasePath is where the state database lives.
func (d *Dir) DatabasePath() string { return filepath.Join(d.path, "state.db") }

// Lock takes the data directory's instance lock, creating the directory
// (0700) if needed. Holding it already is fine.
func (d *Dir) Lock() error {
	if d.lock != nil {
		return nil
	}
	if err := os.MkdirAll(d.path, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	lock, err := lockDataDir(d.path)
	if err != nil {
		return err
	}
	d.lock = lock
	return nil
}

// Open takes the lock if it is not held yet and opens the state database,
// moving a damaged one aside for an empty one (OpenOrReplace). Open once
// is enough: later calls do nothing.
func (d *Dir) Open() error {
	if d.store != nil {
		return nil
	}
	if err := d.Lock(); err != nil {
		return err
	}
	var err error
	d.store, err = OpenOrReplace(d.DatabasePath(), d.log)
	return err
}

// Store is the open state database (nil before Open).
func (d *Dir) Store() *Store { return d.store }

// Close closes the database, then releases the lock.
func (d *Dir) Close() {
	d.store.Close()
	d.lock.Close()
	d.lock = nil
}

// lockDataDir makes sure one daemon at a time uses a data directory: two
// would each start their own copy of every pod.
func lockDataDir(dir string) (*os.File, error) {
	name := filepath.Join(dir, "podvisor.lock")
	f, err := api.LockFile(name)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return nil, fmt.Errorf("data directory %s is in use by another podvisor%s", dir, holders(name))
	}
	return f, err
}

// holders names the processes that have a file open, for error messages.
func holders(path string) string {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	var out []string
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == path {
			pid := strings.Split(fd, "/")[2]
			cmd, _ := os.ReadFile("/proc/" + pid + "/cmdline")
			out = append(out, fmt.Sprintf("pid %s (%s)", pid, strings.ReplaceAll(strings.TrimRight(string(cmd), "\x00"), "\x00", " ")))
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": held by " + strings.Join(out, ", ")
}
