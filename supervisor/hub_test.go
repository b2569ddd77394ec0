package supervisor

import (
	"os/exec"
	"strings"
	"testing"
)

// The hub attaches from outside (sync/device, wired by cmd/podvisor):
// the daemon links nothing of the hub's wire, storage or agent.
func TestSupervisorImportsNothingFromSync(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/podvisor/podvisor/sync/") {
			t.Errorf("supervisor imports %s", pkg)
		}
	}
}
