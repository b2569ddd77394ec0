package linked

import (
	"slices"
	"strings"
	"testing"
)

// This package links testing and os/exec, itself, and nothing else of
// podvisor's.
func TestPackagesOfThisPackage(t *testing.T) {
	const self = "github.com/podvisor/podvisor/test/linked"
	pkgs := Packages(t, ".")
	if !slices.Contains(pkgs, "testing") || !slices.Contains(pkgs, "os/exec") || !slices.Contains(pkgs, self) {
		t.Fatalf("go list -deps . = %v", pkgs)
	}
	for _, p := range pkgs {
		if strings.HasPrefix(p, "github.com/podvisor/podvisor/") && p != self {
			t.Errorf("links %s", p)
		}
	}
}
