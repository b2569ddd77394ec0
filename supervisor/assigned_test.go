package supervisor

import (
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/linked"
)

// The hub attaches from outside (sync/uplink, wired by cmd/podvisor):
// the daemon links nothing of the hub's wire, storage or agent.
func TestSupervisorImportsNothingFromSync(t *testing.T) {
	for _, pkg := range linked.Packages(t, ".") {
		if strings.HasPrefix(pkg, "github.com/podvisor/podvisor/sync/") {
			t.Errorf("supervisor imports %s", pkg)
		}
	}
}
