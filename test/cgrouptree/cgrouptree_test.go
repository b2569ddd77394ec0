package cgrouptree

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/podvisor/podvisor/test/prereq"
)

// A tree with nested empty cgroups is removed in every hierarchy.
func TestRemoveEmptyRemovesNestedCgroups(t *testing.T) {
	prereq.Root(t, "making cgroups")
	root := fmt.Sprintf("podvisor-cgrouptree-test-%d", os.Getpid())
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*")
	made := 0
	for _, h := range append(dirs, "/sys/fs/cgroup") {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue // not a hierarchy (a cgroup v1 tmpfs top, a file)
		}
		if os.MkdirAll(filepath.Join(h, root, "a", "b"), 0o755) == nil {
			made++
		}
	}
	if made == 0 {
		prereq.Missing(t, "no writable cgroup hierarchy under /sys/fs/cgroup")
	}
	if RemoveEmpty(root) {
		t.Fatalf("%s left in some hierarchy", root)
	}
}

// Removing a root nobody made is harmless and reports nothing left.
func TestRemoveEmptyOfAMissingRoot(t *testing.T) {
	if RemoveEmpty(fmt.Sprintf("podvisor-cgrouptree-missing-%d", os.Getpid())) {
		t.Fatal("a missing root reported as left")
	}
}
