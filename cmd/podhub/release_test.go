package main

import (
	"os"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/protocol"
)

// The release and update commands refuse what is missing or wrong, in
// one line naming it, before they reach podhub serve.
func TestReleaseAndUpdateUsage(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"release"}, "usage: podhub release push"},
		{[]string{"release", "push"}, "--version and at least one --file are required"},
		{[]string{"release", "push", "--version", "v1.0.0"}, "--version and at least one --file"},
		{[]string{"release", "push", "--version", "v1.0.0", "--file", "/nonexistent/podvisor"}, "/nonexistent/podvisor"},
		// A Go binary that is not one of podvisor's (this test's own).
		{[]string{"release", "push", "--version", "v1.0.0", "--file", os.Args[0]}, "not one of podvisor's binaries"},
		{[]string{"release", "push", "--version", "v1.0.0", "--file", "x", "extra"}, `unexpected argument "extra"`},
		{[]string{"firmware"}, "usage: podhub firmware push"},
		{[]string{"firmware", "push", "--name", "os"}, "--name, --version and --file are required"},
		{[]string{"firmware", "update", "--version", "v1", "--device", "d1"}, "--name for firmware"},
		{[]string{"update"}, "--version is required"},
		{[]string{"update", "--version", "v1.0.0"}, "give --device ID or --selector k=v"},
		{[]string{"update", "--version", "v1.0.0", "--device", "d1", "--selector", "k=v"}, "give --device ID or --selector"},
		{[]string{"update", "--version", "v1.0.0", "--selector", "novalue"}, `label "novalue": want key=value`},
		{[]string{"update", "frob", "u1"}, `unexpected argument "frob"`},
		{[]string{"describe", "release"}, "usage"},
		// Parsed whole, flags after the words: only the hub is missing.
		{[]string{"update", "--device", "d1", "--version", "v1.0.0", "--max-unavailable", "2"}, "podhub is not reachable"},
		{[]string{"update", "pause", "podvisor-v1.0.0"}, "podhub is not reachable"},
		{[]string{"get", "releases"}, "podhub is not reachable"},
		{[]string{"get", "updates"}, "podhub is not reachable"},
		{[]string{"delete", "release", "v1.0.0", "--name", "gw-os"}, "podhub is not reachable"},
	} {
		out, errOut, code := runCLI(t, append([]string{"--data-dir", dir}, c.args...)...)
		if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, c.want) {
			t.Errorf("%q: code %d, stdout %q, stderr %q, want %q", c.args, code, out, errOut, c.want)
		}
	}
}

func TestUpdateColumn(t *testing.T) {
	for _, c := range []struct {
		s    *protocol.UpdateState
		want string
	}{
		{nil, "<none>"},
		{&protocol.UpdateState{Phase: protocol.UpdateDownloading, Percent: 40}, "Downloading 40%"},
		{&protocol.UpdateState{Phase: protocol.UpdateCommitted, Version: "v1.2.0"}, "Committed v1.2.0"},
		{&protocol.UpdateState{Phase: protocol.UpdateRolledBack, Reason: "not ready\nwithin 5m"}, "RolledBack: not ready within 5m"},
		{&protocol.UpdateState{Phase: protocol.UpdateFailed, Reason: strings.Repeat("x", 100)}, "Failed: " + strings.Repeat("x", 57) + "..."},
	} {
		if got := updateColumn(c.s); got != c.want {
			t.Errorf("updateColumn(%+v) = %q, want %q", c.s, got, c.want)
		}
	}
}

func TestChunkConfigFromPodhubYAML(t *testing.T) {
	var cfg config
	cfg.Updates.ChunkRate, cfg.Updates.ChunkReads = "8Mi", 2
	c, err := cfg.chunkConfig()
	if err != nil || c.Rate != 8<<20 || c.Reads != 2 {
		t.Fatalf("8Mi, 2 reads: %+v %v", c, err)
	}
	cfg.Updates.ChunkRate = "10"
	if _, err := cfg.chunkConfig(); err == nil || !strings.Contains(err.Error(), "updates.chunkRate") {
		t.Fatalf("a rate of 10 bytes/s: %v", err)
	}
	cfg.Updates.ChunkRate, cfg.Updates.ChunkReads = "", 100
	if _, err := cfg.chunkConfig(); err == nil || !strings.Contains(err.Error(), "updates.chunkReads") {
		t.Fatalf("100 reads: %v", err)
	}
	if c, err := (config{}).chunkConfig(); err != nil || c.Rate != 0 || c.Reads != 0 {
		t.Fatalf("defaults (the chunk server's): %+v %v", c, err)
	}
}
