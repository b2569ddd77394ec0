package protocol

import (
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/linked"
)

// The wire format depends on Kubernetes' types, not on the daemon: what
// makes a pod valid comes in as a PodDecoder.
func TestProtocolImportsNoDaemonCode(t *testing.T) {
	for _, pkg := range linked.Packages(t, ".") {
		if strings.HasPrefix(pkg, "github.com/podvisor/podvisor/") && pkg != "github.com/podvisor/podvisor/sync/protocol" {
			t.Errorf("sync/protocol imports %s", pkg)
		}
	}
}
