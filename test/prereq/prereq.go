// Package prereq holds the rule every podvisor test follows when its
// environment lacks something it needs (root, cgroups, containerd, eBPF, a
// command): skip on a developer's machine, fail under CI=true, where a
// skip would hide a test that never ran. It imports no podvisor package,
// so that any package's in-package tests can use it.
package prereq

import (
	"os"
	"testing"
)

// Missing skips the test, or fails it under CI=true, saying what is
// missing.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if CI() {
		t.Fatalf("CI prerequisite missing: "+format, args...)
	}
	t.Skipf("prerequisite missing (fails in CI): "+format, args...)
}

// CI reports whether the tests run in CI (CI=true), where nothing may
// be skipped for want of a prerequisite.
func CI() bool {
	return os.Getenv("CI") == "true"
}

// Root skips the test, or fails it under CI=true, unless it runs as root;
// why says what needs root.
func Root(t testing.TB, why string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Missing(t, "root: %s", why)
	}
}
