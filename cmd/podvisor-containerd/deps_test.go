package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The plugin speaks pluginapi and links nothing of the daemon's side:
// linking Kubernetes' API types through the daemon's runtime packages
// measured +6.7 MiB of plugin binary (17.8 → 24.5 MiB stripped).
func TestPluginLinksNoDaemon(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "k8s.io/") || pkg == "github.com/podvisor/podvisor/supervisor/runtime" ||
			pkg == "github.com/podvisor/podvisor/supervisor/runtime/containerd" ||
			pkg == "github.com/podvisor/podvisor/supervisor/lifecycle" {
			t.Errorf("podvisor-containerd links %s", pkg)
		}
	}
}
