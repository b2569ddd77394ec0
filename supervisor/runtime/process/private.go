package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// A container whose environment holds a Secret's data (runtime.Process
// SecretEnv) has its command and environment in a private spec
// (shim.PrivateSpec) on a memory-backed file system, never on the data
// directory's disk: PrivateDir beside the instance directories, a tmpfs
// the daemon mounts (0700) unless it is memory-backed already. It lives
// until the device reboots, so a restarted daemon or keeper finds it
// (after a reboot no instance survives to need it); a private spec goes
// when its instance has ended.

// PrivateDir is the name of the private specs' directory, beside the
// instance directories (<data-dir>/private).
const PrivateDir = runtime.PrivateDir

func (r *Runtime) privateDir() string { return filepath.Join(filepath.Dir(r.dir), PrivateDir) }

// privateFile is where instance id's private spec is.
func (r *Runtime) privateFile(id string) string {
	return filepath.Join(r.privateDir(), id+".json")
}

// preparePrivate makes sure the private specs' directory is memory-backed
// and has room for a spec of about size bytes, and returns the instance's
// private file. An error is the container's CreateContainerConfigError:
// it waits rather than put its Secrets on disk.
func (r *Runtime) preparePrivate(id string, size int) (string, error) {
	dir := r.privateDir()
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = ensureMemoryFS(dir, int64(size))
	}
	if err == nil {
		err = os.Chmod(dir, 0o700) // where it was memory-backed already
	}
	if err != nil {
		return "", &runtime.CreateError{Reason: "CreateContainerConfigError",
			Message: fmt.Sprintf("the container's environment holds a Secret's data, kept only on a memory-backed file system at %s: %v", dir, err)}
	}
	return r.privateFile(id), nil
}

// ensureMemoryFS mounts a tmpfs at dir unless it is memory-backed, and
// makes room for need bytes (runtime.EnsureMemoryFS).
func ensureMemoryFS(dir string, need int64) error { return runtime.EnsureMemoryFS(dir, need) }

// isMountPoint reports whether dir is the root of a mount: its device
// differs from its parent's.
func isMountPoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// removePrivate removes an instance's private spec, if it has one.
func (r *Runtime) removePrivate(id string) {
	if err := os.Remove(r.privateFile(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("removing an instance's private spec", "instance", id, "err", err)
	}
	os.Remove(r.privateFile(id) + ".tmp") // a write that failed half-way
}

// sweepPrivate removes the private specs of instances whose directory is
// gone (a daemon that died between the two).
func (r *Runtime) sweepPrivate() {
	entries, _ := os.ReadDir(r.privateDir())
	for _, e := range entries {
		id, ok := strings.CutSuffix(strings.TrimSuffix(e.Name(), ".tmp"), ".json")
		if !ok {
			continue
		}
		if _, err := os.Lstat(r.instanceDir(id)); errors.Is(err, fs.ErrNotExist) {
			os.Remove(filepath.Join(r.privateDir(), e.Name()))
		}
	}
}
