package listen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/pod/mountinfo"
)

// Hierarchy is the host's cgroup2 mount: where sock_ops programs attach
// and what socket cgroup ids refer to.
type Hierarchy struct {
	// Mount is the cgroup2 mount point: /sys/fs/cgroup on a unified host,
	// /sys/fs/cgroup/unified on a hybrid one.
	Mount string
	// Hybrid is true when cgroup v1 hierarchies are mounted too: the
	// container's processes then live in v1 cgroups and must also be
	// placed under Mount ([Hierarchy.Place]) for their sockets to carry
	// a cgroup the watcher knows.
	Hybrid bool
}

// FindHierarchy reads /proc/self/mountinfo for the cgroup2 mount.
func FindHierarchy() (Hierarchy, error) {
	ms, err := mountinfo.Read()
	if err != nil {
		return Hierarchy{}, err
	}
	return hierarchyOf(ms)
}

func hierarchyOf(ms []mountinfo.Mount) (Hierarchy, error) {
	var h Hierarchy
	for _, m := range ms {
		switch m.FSType {
		case "cgroup2":
			if h.Mount == "" {
				h.Mount = m.Point
			}
		case "cgroup":
			h.Hybrid = true
		}
	}
	if h.Mount == "" {
		return Hierarchy{}, errors.New("no cgroup2 mount in /proc/self/mountinfo")
	}
	return h, nil
}

// Dir is the directory of the cgroup rel (a path relative to the
// hierarchy's root, as cgroups.Layout names them). rel may not leave the
// hierarchy.
func (h Hierarchy) Dir(rel string) (string, error) {
	clean := filepath.Clean("/" + rel)
	if clean == "/" || clean != "/"+strings.Trim(rel, "/") {
		return "", fmt.Errorf("cgroup path %q: want a relative path below the cgroup2 root, with no \".\" or \"..\" element", rel)
	}
	return filepath.Join(h.Mount, clean), nil
}

// Place makes the cgroup rel under the cgroup2 mount (and its parents)
// and moves pid into it, so the sockets pid creates from then on belong
// to it. On a hybrid host this mirrors the container's v1 cgroup; on a
// unified host the container is already there and Place is not needed.
func (h Hierarchy) Place(rel string, pid int) (string, error) {
	dir, err := h.Dir(rel)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make cgroup2 directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return "", fmt.Errorf("place pid %d in %s: %w", pid, dir, err)
	}
	return dir, nil
}

// Remove removes the cgroup rel and every cgroup below it, deepest
// first. They must be empty of processes. A cgroup already gone is not
// an error.
func (h Hierarchy) Remove(rel string) error {
	dir, err := h.Dir(rel)
	if err != nil {
		return err
	}
	var dirs []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("walk %s: %w", dir, err)
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove cgroup %s: %w", dirs[i], err)
		}
	}
	return nil
}

// CgroupID is the id of the cgroup2 directory dir: what
// bpf_get_current_cgroup_id and INET_DIAG_CGROUP_ID report for it (its
// kernfs node id, read as a file handle; the inode number before 5.5
// kernels gave out handles).
func CgroupID(dir string) (uint64, error) {
	h, _, err := unix.NameToHandleAt(unix.AT_FDCWD, dir, 0)
	if err == nil && h.Size() == 8 {
		return binary.NativeEndian.Uint64(h.Bytes()), nil
	}
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return 0, fmt.Errorf("cgroup id of %s: %w", dir, err)
	}
	return st.Ino, nil
}

// cgroupIDs are the ids of dir and of every cgroup below it.
func cgroupIDs(dir string) (map[uint64]bool, error) {
	ids := map[uint64]bool{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		id, err := CgroupID(p)
		if err != nil {
			return err
		}
		ids[id] = true
		return nil
	})
	return ids, err
}

// cgroupPids are the processes in dir and in the cgroups below it.
func cgroupPids(dir string) ([]int, error) {
	var pids []int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids, err
}
