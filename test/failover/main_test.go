package failover

import (
	"fmt"
	"os"
	"path/filepath"

	"testing"

	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/shipped"
)

// bin holds the binaries TestMain builds as they ship: podhub, and the
// daemon with its shim side by side (the daemon finds its shim there).
var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "podvisor-failover-")
	if err != nil {
		panic(err)
	}
	if err := shipped.Build(dir, "podhub", "podvisor", "podvisor-shim"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	bin = dir
	pgtest.MainThen(m, func() { os.RemoveAll(dir) }) // exits
}

func podhubBin() string   { return filepath.Join(bin, "podhub") }
func podvisorBin() string { return filepath.Join(bin, "podvisor") }
