package main

import (
	"os/exec"
	"strings"
	"testing"
)

// The daemon must not link containerd's client or gRPC: that measured +12
// MiB of binary and +10 MiB of resident memory on every device. They live
// in podvisor-containerd, which runs only where containerd pods do. Nor
// net/rpc, whose debug page links html/template (+0.65 MiB).
func TestDaemonLinksNoContainerdClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/containerd/") || strings.HasPrefix(pkg, "google.golang.org/grpc") ||
			pkg == "net/rpc" || pkg == "html/template" {
			t.Errorf("podvisor links %s", pkg)
		}
	}
}
