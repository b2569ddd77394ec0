package crilog

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
)

// criLog writes records ("stdout F text") as a container log.
func criLog(t *testing.T, records ...string) string {
	t.Helper()
	var b strings.Builder
	for _, r := range records {
		b.WriteString("2026-11-23T13:00:00.000000000Z " + r + "\n")
	}
	path := filepath.Join(t.TempDir(), "0.log")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "termination-log")
	if err := os.WriteFile(path, []byte(content), 0o666); err != nil {
		t.Fatal(err)
	}
	return path
}

// The cases of the node e2e runtime tests ("should report termination
// message ...") and of the kubelet's getTerminationMessage.
func TestTerminationMessage(t *testing.T) {
	const file, fallback = v1.TerminationMessageReadFile, v1.TerminationMessageFallbackToLogsOnError
	log := criLog(t, "stdout P DONE") // echo -n DONE; exit 1
	missing := filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		name    string
		policy  v1.TerminationMessagePolicy
		file    string
		code    int32
		reason  string
		runtime string
		want    string
	}{
		{name: "file", policy: file, file: writeFile(t, "DONE"), want: "DONE"},
		{name: "file on failure", policy: file, file: writeFile(t, "bye"), code: 1, want: "bye"},
		{name: "file policy never reads the log", policy: file, file: writeFile(t, ""), code: 1, want: ""},
		{name: "fallback on failure", policy: fallback, file: writeFile(t, ""), code: 1, want: "DONE"},
		{name: "fallback with no file", policy: fallback, file: missing, code: 1, want: "DONE"},
		{name: "fallback not on success", policy: fallback, file: writeFile(t, ""), code: 0, want: ""},
		{name: "file wins over the log", policy: fallback, file: writeFile(t, "OK"), code: 0, want: "OK"},
		{name: "file wins on failure too", policy: fallback, file: writeFile(t, "OK"), code: 2, want: "OK"},
		{name: "never ran", policy: fallback, file: writeFile(t, ""), code: 128, reason: "StartError", runtime: "exec: no such file", want: "exec: no such file"},
		{name: "runtime message first", policy: file, file: writeFile(t, "DONE"), code: 137, runtime: "oom", want: "oom: DONE"},
		{name: "the last 4096 bytes", policy: file, file: writeFile(t, strings.Repeat("a", 5000)+"END"), want: strings.Repeat("a", 4093) + "END"},
	} {
		got := TerminationMessage(tc.policy, tc.file, log, tc.code, tc.reason, tc.runtime)
		if got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// A link planted at the message path is not followed: the daemon reads as
// root.
func TestTerminationMessageFollowsNoLink(t *testing.T) {
	secret := writeFile(t, "secret")
	link := filepath.Join(t.TempDir(), "termination-log")
	if err := os.Symlink(secret, link); err != nil {
		t.Fatal(err)
	}
	got := TerminationMessage(v1.TerminationMessageReadFile, link, "", 1, "", "")
	if strings.Contains(got, "secret") || !strings.HasPrefix(got, "Error on reading termination log") {
		t.Fatalf("message %q", got)
	}
}

// The fallback takes the last 80 log lines, then their last 2048 bytes;
// partial records join their line.
func TestLogTail(t *testing.T) {
	var records []string
	for i := 1; i <= 100; i++ {
		records = append(records, fmt.Sprintf("stdout F line %d", i))
	}
	text := LogTail(criLog(t, records...), MaxTerminationLogLines, 1<<20)
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 80 || lines[0] != "line 21" || lines[79] != "line 100" {
		t.Fatalf("%d lines, %q … %q; want line 21 … line 100", len(lines), lines[0], lines[len(lines)-1])
	}
	long := LogTail(criLog(t, "stderr F "+strings.Repeat("x", 3000), "stdout P par", "stdout F tial"), 80, MaxTerminationLogBytes)
	if len(long) != 2048 || !strings.HasSuffix(long, "x\npartial\n") {
		t.Fatalf("tail of %d bytes ending %q", len(long), long[len(long)-20:])
	}
	if got := LogTail(filepath.Join(t.TempDir(), "none"), 80, 2048); got != "" {
		t.Fatalf("missing log: %q", got)
	}
}
