package protocol

import (
	"os/exec"
	"strings"
	"testing"
)

// The wire format depends on Kubernetes' types, not on the daemon: what
// makes a pod valid comes in as a PodDecoder.
func TestProtocolImportsNoDaemonCode(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/podvisor/podvisor/") && pkg != "github.com/podvisor/podvisor/sync/protocol" {
			t.Errorf("sync/protocol imports %s", pkg)
		}
	}
}
