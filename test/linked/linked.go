// Package linked lists what a package links (go list -deps), for the
// tests that keep a binary or a layer from pulling in what it must not.
// It imports no podvisor package, so that any package's tests can use it.
package linked

import (
	"os/exec"
	"strings"
	"testing"
)

// Packages are the import paths pkg depends on, itself and the standard
// library included, as go list -deps names them; pkg is a path or
// pattern as go list takes it ("." for the test's own package).
func Packages(t testing.TB, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	return strings.Fields(string(out))
}
