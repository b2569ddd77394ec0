package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// runCLI runs podhub in-process and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestEveryCommandPrintsItsHelp(t *testing.T) {
	dir := t.TempDir() // serve reads its config before its flags
	for cmd := range synopses {
		words := strings.Fields(cmd)
		for _, args := range [][]string{append(words, "--help"), append(words, "-h"), {"help", words[0]}} {
			args = append([]string{"--data-dir", dir}, args...)
			out, errOut, code := runCLI(t, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage:\n  podhub [--data-dir DIR] "+words[0]) {
				t.Errorf("%q: code %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
	}
	if out, _, code := runCLI(t, "--data-dir", dir, "serve", "--help"); code != 0 || !strings.Contains(out, "-mqtt-listen") {
		t.Errorf("serve --help: code %d\n%s", code, out)
	}
	if out, _, code := runCLI(t); code != 0 || !strings.Contains(out, "podhub version") {
		t.Errorf("no arguments: code %d\n%s", code, out)
	}
}

// Every error, usage errors included, is one line "error: ..." on stderr
// with exit code 1 and nothing on stdout, as in podvisor.
func TestErrorsAreOneLineExitOne(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"frobnicate"},
		{"init", "--bogus"},
		{"serve", "--bogus"},
		{"get"},
		{"get", "pods"},
		{"get", "widgets"},
		{"apply"},
		{"delete", "pod", "x"},
		{"describe"},
		{"label", "device"},
		{"device"},
		{"device", "frob"},
		{"device", "add"},
		{"version", "extra"},
		{"get", "devices"},
		{"get", "devices", "--data-dir"},
	} {
		args = append([]string{"--data-dir", dir}, args...)
		out, errOut, code := runCLI(t, args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// --data-dir is a global flag: before or after the command words.
func TestDataDirBeforeOrAfterTheCommand(t *testing.T) {
	for _, place := range []string{"before", "after", "between"} {
		dir := filepath.Join(t.TempDir(), "hub")
		var args []string
		switch place {
		case "before":
			args = []string{"--data-dir", dir, "init"}
		case "after":
			args = []string{"init", "--data-dir=" + dir}
		case "between":
			args = []string{"init", "--data-dir", dir, "--broker-name", "hub.example"}
		}
		if _, errOut, code := runCLI(t, args...); code != 0 {
			t.Fatalf("%q: code %d stderr %q", args, code, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, "hub.pub")); err != nil {
			t.Errorf("%q: %v", args, err)
		}
	}
	// A client command reaches the socket in the data dir in both orders.
	dir := t.TempDir()
	for _, args := range [][]string{{"--data-dir", dir, "get", "devices"}, {"get", "devices", "--data-dir", dir}} {
		_, errOut, code := runCLI(t, args...)
		if code != 1 || !strings.Contains(errOut, filepath.Join(dir, "podhub.sock")) {
			t.Errorf("%q: code %d stderr %q", args, code, errOut)
		}
	}
}

// describe device names the pod of each event, as the device reported it.
func TestDescribeEventsNameThePod(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var out bytes.Buffer
	describeEvents(&out, []fleetdb.DeviceEvent{
		{Event: protocol.Event{Time: now.Add(-time.Minute), Type: "Normal", Reason: "Started", Message: "Started container app"}, Pod: "default/app"},
		{Event: protocol.Event{Time: now, Type: "Warning", Reason: "MessageRejected", Message: "bad batch"}},
	}, now)
	lines := strings.Split(out.String(), "\n")
	if len(lines) < 5 || !strings.Contains(lines[1], "Pod") {
		t.Fatalf("events:\n%s", out.String())
	}
	if l := lines[3]; !strings.Contains(l, "default/app") || !strings.Contains(l, "Started container app") {
		t.Errorf("the Started event does not name its pod: %q", l)
	}
	if l := lines[4]; !strings.Contains(l, "<none>") || !strings.Contains(l, "bad batch") {
		t.Errorf("the hub's own event: %q", l)
	}
}
