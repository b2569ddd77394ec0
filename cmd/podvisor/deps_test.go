package main

import (
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/linked"
)

// The daemon must not link containerd's client or gRPC: that measured +12
// MiB of binary and +10 MiB of resident memory on every device. They live
// in podvisor-containerd, which runs only where containerd pods do. Nor
// net/rpc, whose debug page links html/template (+0.65 MiB).
func TestDaemonLinksNoContainerdClient(t *testing.T) {
	for _, pkg := range linked.Packages(t, ".") {
		if strings.HasPrefix(pkg, "github.com/containerd/") || strings.HasPrefix(pkg, "google.golang.org/grpc") ||
			pkg == "net/rpc" || pkg == "html/template" {
			t.Errorf("podvisor links %s", pkg)
		}
	}
}
