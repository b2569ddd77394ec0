// Package cgrouptree removes what tests and benches leave of a cgroup root:
// in every hierarchy (runc makes a container's cgroup in each v1 one, and
// at the top of a cgroup2 mount), empty cgroups deepest first.
package cgrouptree

import (
	"os"
	"path/filepath"
)

// RemoveEmpty removes root's empty cgroups in every hierarchy under
// /sys/fs/cgroup and reports whether any of root is left (a cgroup still
// holding a process stays, with its parents).
func RemoveEmpty(root string) (left bool) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", root))
	for _, dir := range append(dirs, filepath.Join("/sys/fs/cgroup", root)) {
		removeDeepestFirst(dir)
		if _, err := os.Stat(dir); err == nil {
			left = true
		}
	}
	return left
}

func removeDeepestFirst(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeDeepestFirst(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}
