package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/config"
)

// After a firmware install the device reboots with the configured
// command; "never" leaves it to the owner; a failing command says why.
func TestRebootCommand(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if rebootCommand(config.Firmware{Reboot: config.FirmwareRebootNever}, log) != nil {
		t.Fatal("reboot: never still reboots")
	}
	dir := t.TempDir()
	marker := filepath.Join(dir, "rebooted")
	script := filepath.Join(dir, "reboot")
	os.WriteFile(script, []byte("#!/bin/sh\necho \"$@\" > "+marker+"\n"), 0o755)
	if err := rebootCommand(config.Firmware{RebootCommand: []string{script, "now"}}, log)(); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(marker); err != nil || strings.TrimSpace(string(b)) != "now" {
		t.Fatalf("the reboot command did not run with its arguments: %q, %v", b, err)
	}
	failing := filepath.Join(dir, "fail")
	os.WriteFile(failing, []byte("#!/bin/sh\necho no permission >&2\nexit 1\n"), 0o755)
	if err := rebootCommand(config.Firmware{RebootCommand: []string{failing}}, log)(); err == nil || !strings.Contains(err.Error(), "no permission") {
		t.Fatalf("err = %v, want the command's own message", err)
	}
}
