package config

import (
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/linked"
)

// The config sits between cmd and the daemon: it may use the pure deciders
// whose rules a setting must meet, never the daemon's shell, its runtimes,
// observers or the hub's side, so that the import graph stays one-way
// (cmd → config, sync, supervisor → … → vocabulary).
func TestConfigImportsNoShell(t *testing.T) {
	const module = "github.com/podvisor/podvisor/"
	trees := []string{"supervisor/runtime", "supervisor/state", "supervisor/api", "supervisor/pressure", "supervisor/sandbox",
		"supervisor/logind", "sync", "probes", "cgroups", "cmd"}
	for _, pkg := range linked.Packages(t, ".") {
		rel, ok := strings.CutPrefix(pkg, module)
		if !ok {
			continue
		}
		bad := rel == "supervisor" // the shell itself; the deciders below it are allowed
		for _, tree := range trees {
			bad = bad || rel == tree || strings.HasPrefix(rel, tree+"/")
		}
		if bad {
			t.Errorf("config imports %s", pkg)
		}
	}
}

func TestHubPrefixIsTheProtocols(t *testing.T) {
	if DefaultHubPrefix != protocol.DefaultPrefix {
		t.Errorf("DefaultHubPrefix %q, the protocol's %q", DefaultHubPrefix, protocol.DefaultPrefix)
	}
}
