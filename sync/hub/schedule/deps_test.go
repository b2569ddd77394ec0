package schedule

import (
	"os/exec"
	"strings"
	"testing"
)

// The scheduler and its dependency k8s.io/component-helpers belong to the
// hub: the device daemon must not link them (binary size is a budget).
func TestDaemonDoesNotLinkTheScheduler(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/podvisor/podvisor/cmd/podvisor").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/component-helpers") || strings.HasPrefix(pkg, "github.com/podvisor/podvisor/sync/hub") {
			t.Errorf("podvisor links %s", pkg)
		}
	}
}
