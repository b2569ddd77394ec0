package kubectl

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/prereq"
)

// k9sBinary builds (or finds) k9s from the module proxy (k9s.sh).
func k9sBinary(t *testing.T) string {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "sh", "k9s.sh").Output()
	path := strings.TrimSpace(string(out))
	if err != nil || path == "" {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		prereq.Missing(t, "k9s (test/kubectl/k9s.sh): %v %s", err, stderr)
	}
	return path
}

// terminal is k9s running in a detached tmux session of a fixed size on
// a private tmux server, read with capture-pane.
type terminal struct {
	t       *testing.T
	socket  string
	logFile string
}

func startK9s(t *testing.T, k9s, kubeconfig string) *terminal {
	if _, err := exec.LookPath("tmux"); err != nil {
		prereq.Missing(t, "tmux (Debian's tmux) to give k9s a terminal")
	}
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config")
	must(t, os.MkdirAll(cfg, 0o700))
	// No update check (it would reach GitHub), read-only, no logo.
	must(t, os.WriteFile(filepath.Join(cfg, "config.yaml"), []byte(`k9s:
  skipLatestRevCheck: true
  readOnly: true
  refreshRate: 2
  ui:
    logoless: true
    splashless: true
    noIcons: true
`), 0o600))
	term := &terminal{t: t, socket: filepath.Join(dir, "tmux.sock"), logFile: filepath.Join(dir, "k9s.log")}
	// Everything k9s writes stays in dir: its config, state, logs, the
	// client's cache.
	script := fmt.Sprintf(`#!/bin/sh
export HOME=%[1]s/home XDG_CONFIG_HOME=%[1]s/xdg-config XDG_DATA_HOME=%[1]s/xdg-data XDG_STATE_HOME=%[1]s/xdg-state \
	XDG_CACHE_HOME=%[1]s/xdg-cache K9S_CONFIG_DIR=%[2]s K9S_LOGS_DIR=%[1]s KUBECONFIG=%[3]s TERM=xterm-256color
exec %[4]s --kubeconfig %[3]s --readonly --logoless --splashless -c pods -A --logFile %[5]s --logLevel debug
`, dir, cfg, kubeconfig, k9s, term.logFile)
	run := filepath.Join(dir, "k9s-run.sh")
	must(t, os.WriteFile(run, []byte(script), 0o700))
	term.tmux("new-session", "-d", "-x", "200", "-y", "50", "-s", "k9s", run)
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(term.logFile); err == nil {
				t.Logf("k9s log:\n%s", b)
			}
		}
		exec.Command("tmux", "-S", term.socket, "kill-server").Run()
	})
	return term
}

func (term *terminal) tmux(args ...string) string {
	term.t.Helper()
	cmd := exec.Command("tmux", append([]string{"-S", term.socket}, args...)...)
	cmd.Env = append(os.Environ(), "TMUX=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		term.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what the terminal shows now.
func (term *terminal) screen() string { return term.tmux("capture-pane", "-p", "-t", "k9s") }

// waitFor waits (30 s at most) until the screen shows every one of wants.
func (term *terminal) waitFor(what string, wants ...string) string {
	term.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := term.screen()
		missing := ""
		for _, w := range wants {
			if !strings.Contains(s, w) {
				missing = w
				break
			}
		}
		if missing == "" {
			return s
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("waited 30s for k9s to show %s (%q missing); the screen:\n%s", what, missing, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitGone waits (30 s at most) until the screen shows none of gone.
func (term *terminal) waitGone(what string, gone ...string) {
	term.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		s := term.screen()
		left := ""
		for _, g := range gone {
			if strings.Contains(s, g) {
				left = g
				break
			}
		}
		if left == "" {
			return
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("waited 30s for k9s to %s (%q still shown); the screen:\n%s", what, left, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// command types a k9s command (":events") and Enter.
func (term *terminal) command(c string) {
	term.t.Helper()
	term.tmux("send-keys", "-t", "k9s", "-l", ":"+c)
	term.tmux("send-keys", "-t", "k9s", "Enter")
}

func (term *terminal) keys(keys ...string) {
	term.t.Helper()
	term.tmux(append([]string{"send-keys", "-t", "k9s"}, keys...)...)
}

// TestK9s drives a real k9s against the hub in a terminal: the views an
// operator opens (pods, nodes, events, workloads, pulses), a live
// change, describe and logs, and nothing it tried failed in its log.
func TestK9s(t *testing.T) {
	k9s := k9sBinary(t)
	h := newHub(t)
	term := startK9s(t, k9s, h.kubeconfig)

	term.waitFor("the pods of every namespace", "web-dev1", "web-dev2", "db-dev1", "Running")
	start := time.Now()
	h.report("dev2", podItem(filePod("web", 7)))
	deadline := time.Now().Add(30 * time.Second)
	for !rowHas(term.screen(), "web-dev2", "7") {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for k9s to show web-dev2 with 7 restarts; the screen:\n%s", term.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("k9s showed the restart %v after it was stored", time.Since(start).Round(time.Millisecond))

	term.command("nodes")
	term.waitFor("the devices as nodes", "dev1", "dev2", "Ready", "v1.37.2-podvisor")
	term.command("events")
	term.waitFor("a device's event (events.k8s.io/v1)", "BackOff", "Back-off restarting failed container main in pod web")
	term.command("workloads")
	term.waitFor("the workloads", "apps/v1/deployments", "api", "apps/v1/daemonsets", "agent", "v1/pods", "web-dev1")
	term.command("pulses")
	term.waitFor("the pulses' gauges", "Pulses(all)", "Nodes", "Services", "Events", "Daemonsets", "Jobs", "Serviceaccounts")
	term.command("deployments")
	term.waitFor("the deployments", "api", "0/2")

	term.command("pods")
	term.waitFor("the pods again", "web-dev1")
	term.keys("/")
	term.tmux("send-keys", "-t", "k9s", "-l", "db-dev1")
	term.keys("Enter")
	term.waitGone("filter the pods to db-dev1", "web-dev1", "web-dev2")
	term.keys("d")
	term.waitFor("describe of db-dev1", "Describe(default/db-dev1)", "Node:", "dev1/192.0.2.10", "kubernetes.io/config.source: file")
	// A key sent right after Escape would reach k9s as Alt+key: each
	// view is left, and seen gone, before the next key.
	term.keys("Escape")
	term.waitGone("leave the describe view", "Describe(")
	term.keys("l")
	term.waitFor("db-dev1's log, from the device", "hello from default/db container main on dev1")
	term.keys("Escape")
	term.waitGone("leave the log view", "hello from default/db")
	// Read-only: k9s binds no delete (ctrl-d). Had it opened a dialog,
	// the command typed next would go into the dialog, not to k9s.
	term.keys("C-d")
	term.command("nodes")
	if s := term.waitFor("the nodes after ctrl-d", "dev1", "dev2"); strings.Contains(s, "Delete") && strings.Contains(s, "Cancel") {
		t.Errorf("k9s offered a delete on a read-only hub:\n%s", s)
	}

	log, err := os.ReadFile(term.logFile)
	must(t, err)
	for _, line := range strings.Split(string(log), "\n") {
		// k9s cancels its own pulse checks when the view changes before
		// they end ("client rate limiter Wait returned an error: context
		// canceled"); that says nothing of the hub.
		if strings.Contains(line, "Pulse check failed") && strings.Contains(line, "context canceled") {
			continue
		}
		for _, bad := range []string{"Auth request failed", "Component init failed", "Pulse check failed",
			"the server could not find the requested resource", "command not found"} {
			if strings.Contains(line, bad) {
				t.Errorf("k9s log has %q: %s\nthe whole log:\n%s", bad, line, log)
			}
		}
	}
}

// rowHas says a screen line shows name and, in a later column, value.
func rowHas(screen, name, value string) bool {
	for _, l := range strings.Split(screen, "\n") {
		f := strings.Fields(l)
		for i, x := range f {
			if x == name {
				for _, y := range f[i+1:] {
					if y == value {
						return true
					}
				}
			}
		}
	}
	return false
}
