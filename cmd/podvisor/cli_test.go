package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
	"github.com/podvisor/podvisor/supervisor/runtime/process"
)

func TestParseInterspersed(t *testing.T) {
	fs := flag.NewFlagSet("logs", flag.ContinueOnError)
	f := fs.Bool("f", false, "")
	c := fs.String("c", "", "")
	pos, err := parseInterspersed(fs, []string{"web", "-f", "-c", "app"})
	if err != nil || len(pos) != 1 || pos[0] != "web" || !*f || *c != "app" {
		t.Fatalf("pos=%v f=%v c=%q err=%v", pos, *f, *c, err)
	}
	if _, err := parseInterspersed(fs, []string{"--bogus"}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown flag error = %v", err)
	}
}

// A bad config stops podvisor run before it touches anything, with one
// line naming the file and the setting; flags are checked with the file
// (--hub-key beside allowUnsigned).
func TestConfigErrorsNameTheKey(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	data := filepath.Join(dir, "never-made")
	for _, tc := range []struct {
		body  string
		flags []string
		want  string
	}{
		{"manifest: /x\n", nil, `unknown field "manifest"`},
		{"hub: {allowunsigned: true}\n", nil, `unknown field "hub.allowunsigned"`}, // keys are case-sensitive
		{"manifestResync: 0s\n", nil, "manifestResync"},                            // was a panic in the manifest watcher
		{"backoff: {initial: 1m, max: 10s}\n", nil, "backoff.initial"},
		{"backoff: {reset: -1s}\n", nil, "backoff.reset"},
		{"logs: {maxSize: 1Ki}\n", nil, "logs.maxSize"},
		{"logs: {maxFiles: 0}\n", nil, "logs.maxFiles"},
		{"hub: {podSecurity: strict}\n", nil, "hub.podSecurity"},
		{"hub: {url: mqtt://h:1883, allowUnsigned: true}\n", []string{"--hub-key", "/etc/hub.pub"}, "hub.allowUnsigned"},
		{"", []string{"--hub", "tcp://h:1883"}, "hub.url"},
		{"shim: " + filepath.Join(dir, "no-shim") + "\n", nil, "shim"},
	} {
		os.WriteFile(path, []byte(tc.body), 0o644)
		args := append([]string{"run", "--config", path, "--data-dir", data, "--socket", filepath.Join(data, "s.sock")}, tc.flags...)
		out, errOut, code := runCLI(t, args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, "error: config "+path+": ") || !strings.Contains(errOut, tc.want) ||
			strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q %q: code %d, stderr %q; want one line naming %s and %s", tc.body, tc.flags, code, errOut, path, tc.want)
		}
	}
	if _, err := os.Stat(data); err == nil {
		t.Error("a refused config made the data directory")
	}
}

// daemonOptions finds what the file leaves to the host (the node name,
// the shim) and hands each runtime its settings.
func TestDaemonOptionsFromTheFile(t *testing.T) {
	dir := t.TempDir()
	path, shimBin := filepath.Join(dir, "c.yaml"), filepath.Join(dir, "podvisor-shim")
	// The binaries, in case containerd's socket is on this host.
	for _, f := range []string{shimBin, filepath.Join(dir, "podvisor-containerd")} {
		os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755)
	}
	os.WriteFile(path, []byte(`nodeName: gw-17
shim: `+shimBin+`
containerd: {plugin: `+filepath.Join(dir, "podvisor-containerd")+`}
backoff: {initial: 2s, max: 20s}
logs: {maxSize: 64Ki}
gc: {maxDeadContainers: 0}
eviction: {hard: {memory.available: 50Mi}, monitorPeriod: 1s}
shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 7}]
security: {forbidPrivileged: true, allowUntrustedManifests: true}
hub: {podSecurity: restricted, podSecurityVersion: v1.30, allowProcessPods: true}
`), 0o644)
	c, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := daemonOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	if c.NodeName != "gw-17" || cfg.Version != version || cfg.DefaultRuntime != containerd.Name {
		t.Errorf("node %q, version %q, default runtime %q", c.NodeName, cfg.Version, cfg.DefaultRuntime)
	}
	p := settingsOf[process.Settings](t, cfg, process.Name)
	if p.ShimCommand[0] != shimBin || !p.Keeper {
		t.Errorf("process runtime %+v, want the shim %s and the keeper", p, shimBin)
	}
	// A config without a node name takes the host's.
	c.NodeName = ""
	if _, err := daemonOptions(c); err != nil {
		t.Fatal(err)
	}
	if host, _ := os.Hostname(); c.NodeName != host {
		t.Errorf("node name %q, want the host name %q", c.NodeName, host)
	}
}

// Where the config names containerd, its settings and their defaults reach
// the daemon; a missing runtime plugin is an error naming the section.
func TestDaemonOptionsContainerd(t *testing.T) {
	dir := t.TempDir()
	plugin := filepath.Join(dir, "podvisor-containerd")
	shimBin := filepath.Join(dir, "podvisor-shim")
	for _, f := range []string{plugin, shimBin} {
		os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755)
	}
	c := config.Default()
	c.DataDir = filepath.Join(dir, "data")
	c.Shim = shimBin
	c.Containerd.Plugin = plugin
	c.Containerd.Managed = true
	c.Containerd.ImageGC.LowThresholdPercent = 70
	if _, err := exec.LookPath("containerd"); err != nil {
		c.Containerd.Managed = false
		c.Containerd.Address = "/run/c.sock"
	}
	cfg, err := daemonOptions(c)
	if err != nil {
		t.Fatal(err)
	}
	cc := settingsOf[containerd.Config](t, cfg, containerd.Name)
	if cc.Address == "" || cc.SandboxDir != "/run/podvisor/sandbox" || cc.ImageGC.HighThresholdPercent != 85 || cc.ImageGC.LowThresholdPercent != 70 ||
		cc.ImageGC.MinimumAge != 2*time.Minute || cc.ConnectWait != 5*time.Second || cc.Plugin[0] != plugin || cc.ShimGroup != "device" ||
		len(cc.PodInit) != 2 || cc.PodInit[0] != shimBin {
		t.Fatalf("containerd config %+v", cc)
	}
	if c.Containerd.Managed && (cc.Managed.Root != filepath.Join(c.DataDir, "containerd", "root") ||
		cc.Managed.State != config.DefaultManagedState || cc.ImageFS != filepath.Join(c.DataDir, "containerd") ||
		cc.Address != config.DefaultManagedSocket) {
		t.Fatalf("managed containerd %+v, image fs %s", cc.Managed, cc.ImageFS)
	}
	c.Containerd.Plugin = filepath.Join(dir, "none")
	if _, err := daemonOptions(c); err == nil || !strings.Contains(err.Error(), "config: containerd: the runtime plugin") {
		t.Fatalf("missing plugin: %v", err)
	}
}

func TestUnknownCommandIsOneLine(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"frobnicate"}, &out, &errb); code != 1 || strings.Count(errb.String(), "\n") != 1 {
		t.Fatalf("code %d stderr %q", code, errb.String())
	}
}

// runCLI runs podvisor in-process and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, &out, &errb)
	return out.String(), errb.String(), code
}

func TestEveryCommandPrintsItsHelp(t *testing.T) {
	for cmd := range synopses {
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}} {
			out, errOut, code := runCLI(t, args...)
			if code != 0 || errOut != "" || !strings.HasPrefix(out, "Usage:\n  podvisor "+cmd) {
				t.Errorf("%q: code %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
	}
	for _, args := range [][]string{{"get", "pods", "--help"}, {"logs", "web", "--help"}, {"exec", "--help", "--", "sh"}} {
		if out, _, code := runCLI(t, args...); code != 0 || !strings.Contains(out, "Flags:") {
			t.Errorf("%q: code %d, stdout %q", args, code, out)
		}
	}
}

// podvisor help must list every flag run takes: the flags come from run
// --help, which prints the real flag set.
func TestHelpListsEveryRunFlag(t *testing.T) {
	runHelp, _, _ := runCLI(t, "run", "--help")
	help, _, code := runCLI(t, "help")
	if code != 0 {
		t.Fatalf("help exited %d", code)
	}
	flags := regexp.MustCompile(`(?m)^  -(\S+)`).FindAllStringSubmatch(runHelp, -1)
	if len(flags) < 9 {
		t.Fatalf("run --help lists %d flags:\n%s", len(flags), runHelp)
	}
	for _, f := range flags {
		want := "--" + f[1]
		if len(f[1]) == 1 {
			want = "-" + f[1]
		}
		if !strings.Contains(help, "["+want) {
			t.Errorf("podvisor help does not list %s:\n%s", want, help)
		}
	}
}

// Every error, usage errors included, is one line "error: ..." on stderr
// with exit code 1 and nothing on stdout.
func TestErrorsAreOneLineExitOne(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "none.sock")
	for _, args := range [][]string{
		{"frobnicate"},
		{"get"},
		{"get", "pods", "--bogus"},
		{"get", "pods", "-o", "xml"},
		{"logs"},
		{"exec", "web"},
		{"delete", "pod", "x", "--force"},
		{"--bogus", "get", "pods"},
		{"--socket"},
		{"--socket", missing, "get", "pods"},
		{"run", "extra"},
		{"images", "frob"},
	} {
		out, errOut, code := runCLI(t, args...)
		if code != 1 || out != "" || !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%q: code %d, stdout %q, stderr %q", args, code, out, errOut)
		}
	}
}

// standIn serves the daemon's API paths the client commands use, on a unix
// socket, with pods in two namespaces and a log that never ends.
func standIn(t *testing.T) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "api.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	pod := func(ns, name string) v1.Pod {
		return v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Status: v1.PodStatus{Phase: v1.PodRunning}}
	}
	bad := pod("default", "bad.yaml")
	bad.Status = v1.PodStatus{Phase: v1.PodPending, Reason: "Invalid", Message: "/m/bad.yaml: spec.containers: Required value"}
	pods := []v1.Pod{pod("default", "web"), pod("kube-system", "etcd"), bad}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/pods", func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(v1.PodList{Items: pods})
	})
	mux.HandleFunc("GET /v1/pods/{ns}/{name}", func(w http.ResponseWriter, r *http.Request) {
		for _, p := range pods {
			if p.Namespace == r.PathValue("ns") && p.Name == r.PathValue("name") {
				json.NewEncoder(w).Encode(p)
				return
			}
		}
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprintf(w, `{"error": "pod %q not found"}`, r.PathValue("name"))
	})
	mux.HandleFunc("GET /v1/pods/{ns}/{name}/events", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("[]"))
	})
	mux.HandleFunc("GET /v1/pods/{ns}/{name}/log", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first line\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return sock
}

func TestGlobalFlagsBeforeOrAfterTheCommand(t *testing.T) {
	sock := standIn(t)
	after, errOut, code := runCLI(t, "get", "pods", "--socket", sock)
	if code != 0 || !strings.Contains(after, "web") {
		t.Fatalf("get pods --socket: code %d stdout %q stderr %q", code, after, errOut)
	}
	for _, args := range [][]string{
		{"--socket", sock, "get", "pods"},
		{"--socket=" + sock, "get", "pods"},
		{"-socket", sock, "get", "pods"},
	} {
		if out, errOut, code := runCLI(t, args...); code != 0 || out != after {
			t.Errorf("%q: code %d stdout %q stderr %q, want %q", args, code, out, errOut, after)
		}
	}
	out, _, code := runCLI(t, "--socket", sock, "-n", "kube-system", "get", "pods")
	if code != 0 || !strings.Contains(out, "etcd") || strings.Contains(out, "web") {
		t.Errorf("-n before the command: code %d\n%s", code, out)
	}
}

func TestGetPodsAllNamespaces(t *testing.T) {
	sock := standIn(t)
	for _, flag := range []string{"-A", "--all-namespaces"} {
		out, errOut, code := runCLI(t, "--socket", sock, "get", "pods", flag)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 4 || !strings.HasPrefix(lines[0], "NAMESPACE ") ||
			!strings.HasPrefix(lines[1], "default ") || !strings.HasPrefix(lines[3], "kube-system ") {
			t.Errorf("get pods %s: code %d stderr %q\n%s", flag, code, errOut, out)
		}
	}
}

// get lists a rejected manifest as bad.yaml; describe finds it by that
// name and by the pod name a user would guess, and says why.
func TestDescribeFindsAnInvalidManifestRow(t *testing.T) {
	sock := standIn(t)
	get, _, _ := runCLI(t, "--socket", sock, "get", "pods")
	if !strings.Contains(get, "bad.yaml") {
		t.Fatalf("get pods:\n%s", get)
	}
	for _, args := range [][]string{{"bad.yaml"}, {"bad"}, {"bad", "-n", "default"}} {
		out, errOut, code := runCLI(t, append([]string{"--socket", sock, "describe", "pod"}, args...)...)
		if code != 0 || !strings.Contains(out, "bad.yaml") || !strings.Contains(out, "spec.containers: Required value") {
			t.Errorf("describe pod %q: code %d stderr %q\n%s", args, code, errOut, out)
		}
	}
}

// Ctrl-C (the context cancelled) on logs -f ends it with exit 0 and
// nothing on stderr, as kubectl logs -f does.
func TestLogsFollowEndsQuietlyOnInterrupt(t *testing.T) {
	sock := standIn(t)
	ctx, cancel := context.WithCancel(context.Background())
	out := &signalWriter{first: make(chan struct{})}
	var errb bytes.Buffer
	done := make(chan int)
	go func() { done <- runContext(ctx, []string{"--socket", sock, "logs", "-f", "web"}, out, &errb) }()
	select {
	case <-out.first:
	case code := <-done:
		t.Fatalf("logs -f ended (code %d, stderr %q) before the first line", code, errb.String())
	case <-time.After(10 * time.Second):
		t.Fatal("not within 10s: the first log line")
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 || errb.Len() != 0 {
			t.Fatalf("logs -f after Ctrl-C: code %d stderr %q", code, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not within 10s: logs -f returning after its context was cancelled")
	}
}

// signalWriter closes first when something is written to it.
type signalWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	first chan struct{}
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.buf.Len() == 0 && len(p) > 0 {
		close(w.first)
	}
	return w.buf.Write(p)
}

// settingsOf is what the daemon's config gives the runtime named.
func settingsOf[T any](t *testing.T, cfg supervisor.Options, name string) T {
	t.Helper()
	for _, c := range cfg.Runtimes {
		if c.Name == name {
			s, ok := c.Settings.(T)
			if !ok {
				t.Fatalf("runtime %s: settings %T", name, c.Settings)
			}
			return s
		}
	}
	t.Fatalf("no runtime %s in the daemon's config", name)
	var zero T
	return zero
}
