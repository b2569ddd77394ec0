package plugin

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/test/cgrouptree"
	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
)

func TestKubernetesArgs(t *testing.T) {
	ep, cmd := []string{"/ep"}, []string{"c1"}
	for _, tc := range []struct {
		command, args, want []string
	}{
		{nil, nil, []string{"/ep", "c1"}},
		{nil, []string{"a"}, []string{"/ep", "a"}},
		{[]string{"x"}, nil, []string{"x"}},
		{[]string{"x"}, []string{"a"}, []string{"x", "a"}},
	} {
		if got := kubernetesArgs(ep, cmd, tc.command, tc.args); strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("command %v args %v: got %v, want %v", tc.command, tc.args, got, tc.want)
		}
	}
}

func TestNormalizeImage(t *testing.T) {
	for in, want := range map[string]string{
		"busybox":                 "docker.io/library/busybox:latest",
		"busybox:1.36":            "docker.io/library/busybox:1.36",
		"podvisor.test/busybox:1": "podvisor.test/busybox:1",
	} {
		if got, err := NormalizeImage(in); err != nil || got != want {
			t.Errorf("%s: got %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := NormalizeImage("bad ref!"); err == nil {
		t.Error("an invalid reference was accepted")
	}
}

func TestArchiveName(t *testing.T) {
	for in, want := range map[string]string{"/x/My App_v1.tar": "my-app-v1", "a.oci.tar.gz": "a", "---.tar": "image"} {
		if got := archiveName(in); got != want {
			t.Errorf("%s: got %q, want %q", in, got, want)
		}
	}
}

// newPlugin starts a private containerd and a plugin on it.
func newPlugin(t *testing.T) (*Plugin, *ctrdtest.Containerd) {
	// The tests' containers have no cgroup path of their own, so containerd
	// gives them /NAMESPACE/ID; runc removes the ID level only, and not for
	// a task still running when containerd stops. Registered first, so it
	// runs after containerd and its shims are gone.
	t.Cleanup(func() {
		cgrouptree.RemoveEmpty(pluginapi.Namespace)
	})
	ctrd := ctrdtest.Start(t)
	p, err := New(Config{Address: ctrd.Address, RuncRoot: ctrd.RuncRoot(), FIFODir: filepath.Join(t.TempDir(), "fifo")}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p, ctrd
}

func importTestImage(t *testing.T, p *Plugin, name string) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "busybox.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: name, Cmd: []string{"sh"}, StopSignal: "SIGUSR1"}); err != nil {
		t.Fatal(err)
	}
	var imp pluginapi.ImportReply
	if err := p.Import(pluginapi.ImportArgs{Path: archive}, &imp); err != nil {
		t.Fatal(err)
	}
	if len(imp.Names) != 1 || imp.Names[0] != name {
		t.Fatalf("imported %v, want [%s]", imp.Names, name)
	}
}

func TestRunWaitExecSignal(t *testing.T) {
	p, _ := newPlugin(t)
	const image = "podvisor.test/busybox:1"
	importTestImage(t, p, image)

	logPath := filepath.Join(t.TempDir(), "0.log")
	cfg := pluginapi.ContainerConfig{
		ID: "c1", Labels: map[string]string{pluginapi.LabelInstance: "c1"}, Image: image, PullPolicy: "Never",
		Command: []string{"sh", "-c"}, Args: []string{"echo hello $GREETING; trap 'echo bye; exit 3' TERM; while :; do sleep 1; done"},
		Env: []string{"GREETING=world"}, Hostname: "pod-a", LogPath: logPath, LogMaxBytes: 1 << 20, LogMaxFiles: 2,
	}
	var run pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg}, &run); err != nil || run.Failure != nil {
		t.Fatalf("run: %v %+v", err, run.Failure)
	}
	if run.Pid <= 0 || run.StopSignal != "SIGUSR1" {
		t.Fatalf("run reply %+v: want a pid and the image's stop signal", run)
	}
	waitFor(t, "the container's log to hold hello world", func() bool {
		b, _ := os.ReadFile(logPath)
		return strings.Contains(string(b), " stdout F hello world\n")
	})

	var ex pluginapi.ExecReply
	if err := p.Exec(pluginapi.ExecArgs{ID: "c1", Command: []string{"hostname"}, Timeout: 5 * time.Second}, &ex); err != nil {
		t.Fatal(err)
	}
	if ex.ExitCode != 0 || strings.TrimSpace(ex.Output) != "pod-a" {
		t.Fatalf("exec hostname: %+v", ex)
	}
	if err := p.Exec(pluginapi.ExecArgs{ID: "c1", Command: []string{"sleep", "10"}, Timeout: 200 * time.Millisecond}, &ex); err != nil || !ex.TimedOut {
		t.Fatalf("exec past its timeout: %+v %v", ex, err)
	}

	var list pluginapi.ListReply
	if err := p.List(pluginapi.Empty{}, &list); err != nil || len(list.Containers) != 1 || !list.Containers[0].Running || list.Containers[0].StartedAt.IsZero() {
		t.Fatalf("list: %+v %v", list, err)
	}
	waited := make(chan pluginapi.ExitStatus, 1)
	go func() {
		var st pluginapi.ExitStatus
		p.Wait(pluginapi.IDArgs{ID: "c1"}, &st)
		waited <- st
	}()
	if err := p.Signal(pluginapi.SignalArgs{ID: "c1", Signal: int(syscall.SIGTERM)}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	select {
	case st := <-waited:
		if st.ExitCode != 3 {
			t.Fatalf("exit %+v, want code 3 from the TERM trap", st)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no exit after SIGTERM")
	}
	waitFor(t, "the container's log to hold bye", func() bool { b, _ := os.ReadFile(logPath); return strings.Contains(string(b), " stdout F bye\n") })
	list = pluginapi.ListReply{}
	if err := p.List(pluginapi.Empty{}, &list); err != nil || list.Containers[0].Running || list.Containers[0].Exit == nil || list.Containers[0].Exit.ExitCode != 3 {
		t.Fatalf("list after exit: %+v %v", list, err)
	}
	if err := p.Remove(pluginapi.IDArgs{ID: "c1"}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
	list = pluginapi.ListReply{}
	if err := p.List(pluginapi.Empty{}, &list); err != nil || len(list.Containers) != 0 {
		t.Fatalf("list after remove: %+v %v", list, err)
	}
}

func TestRunFailures(t *testing.T) {
	p, _ := newPlugin(t)
	for _, tc := range []struct {
		image, policy, reason string
	}{
		{"podvisor.test/missing:1", "Never", pluginapi.ErrImageNeverPull},
		{"Not A Ref", "IfNotPresent", pluginapi.InvalidImageName},
		// No registry is reachable from tests: the pull fails.
		{"127.0.0.1:1/missing:1", "IfNotPresent", pluginapi.ErrImagePull},
	} {
		var run pluginapi.RunReply
		cfg := pluginapi.ContainerConfig{ID: "f", Image: tc.image, PullPolicy: tc.policy, LogPath: "/tmp/x.log"}
		if err := p.Run(pluginapi.RunArgs{Config: cfg}, &run); err != nil {
			t.Fatal(err)
		}
		if run.Failure == nil || run.Failure.Reason != tc.reason {
			t.Errorf("%s (%s): failure %+v, want %s", tc.image, tc.policy, run.Failure, tc.reason)
		}
	}
}

// waitFor waits up to 10 s for cond; on timeout the test fails saying
// what it waited for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Unused images go, least recently used first; one in use stays.
func TestPruneImages(t *testing.T) {
	p, _ := newPlugin(t)
	for _, name := range []string{"podvisor.test/old:1", "podvisor.test/used:1", "podvisor.test/new:1"} {
		importTestImage(t, p, name)
	}
	cfg := pluginapi.ContainerConfig{ID: "u1", Labels: map[string]string{pluginapi.LabelInstance: "u1"},
		Image: "podvisor.test/used:1", PullPolicy: "Never", Command: []string{"sleep", "100"},
		LogPath: filepath.Join(t.TempDir(), "0.log")}
	var run pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg}, &run); err != nil || run.Failure != nil {
		t.Fatalf("run: %v %+v", err, run.Failure)
	}
	defer p.Remove(pluginapi.IDArgs{ID: "u1"}, &pluginapi.Empty{})
	var pr pluginapi.PruneReply
	if err := p.PruneImages(pluginapi.PruneArgs{All: true, MinAge: time.Hour}, &pr); err != nil || len(pr.Removed) != 0 {
		t.Fatalf("images younger than the minimum age were removed: %v %v", pr.Removed, err)
	}
	if err := p.PruneImages(pluginapi.PruneArgs{Bytes: 1}, &pr); err != nil {
		t.Fatal(err)
	}
	if len(pr.Removed) != 1 || pr.Removed[0] != "podvisor.test/old:1" || pr.Freed <= 0 {
		t.Fatalf("pruning 1 byte removed %v (%d bytes), want only the oldest unused image", pr.Removed, pr.Freed)
	}
	pr = pluginapi.PruneReply{}
	if err := p.PruneImages(pluginapi.PruneArgs{All: true}, &pr); err != nil {
		t.Fatal(err)
	}
	var list pluginapi.ImagesReply
	p.Images(pluginapi.Empty{}, &list)
	if len(pr.Removed) != 1 || pr.Removed[0] != "podvisor.test/new:1" || len(list.Images) != 1 || list.Images[0].Name != "podvisor.test/used:1" {
		t.Fatalf("pruning all removed %v and left %+v; want only the image in use left", pr.Removed, list.Images)
	}
}

func TestRegistryCredentials(t *testing.T) {
	file := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(file, []byte(`{"auths": {
		"registry.example.com": {"auth": "dXNlcjpwYTpzcw=="},
		"https://index.docker.io/v1/": {"username": "hub", "password": "secret"}}}`), 0o600)
	for host, want := range map[string][2]string{
		"registry.example.com": {"user", "pa:ss"}, // the password may hold a colon
		"registry-1.docker.io": {"hub", "secret"},
		"other.example.com":    {"", ""},
	} {
		user, pass, err := authFor(file, host)
		if err != nil || user != want[0] || pass != want[1] {
			t.Errorf("%s: %q %q %v, want %q %q", host, user, pass, err, want[0], want[1])
		}
	}
	os.WriteFile(file, []byte(`{"auths": `), 0o600)
	if _, _, err := authFor(file, "x"); err == nil || !strings.Contains(err.Error(), file) {
		t.Errorf("a broken file: %v, want an error naming it", err)
	}
}

// The exit is reported once the log holds everything the container wrote,
// its last line without a newline included (as a partial record), and it
// stays known after the task is gone. The run reply carries the CRI's
// ImageRef.
func TestExitReportedAfterTheLogIsComplete(t *testing.T) {
	p, _ := newPlugin(t)
	const image = "podvisor.test/busybox:1"
	importTestImage(t, p, image)
	logPath := filepath.Join(t.TempDir(), "0.log")
	cfg := pluginapi.ContainerConfig{
		ID: "c2", Labels: map[string]string{pluginapi.LabelInstance: "c2"}, Image: image, PullPolicy: "Never",
		Command: []string{"sh", "-c"}, Args: []string{"echo first; echo -n last; exit 4"},
		LogPath: logPath, LogMaxBytes: 1 << 20, LogMaxFiles: 2,
	}
	var run pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg}, &run); err != nil || run.Failure != nil {
		t.Fatalf("run: %v %+v", err, run.Failure)
	}
	if !regexp.MustCompile(`^podvisor\.test/busybox@sha256:[0-9a-f]{64}$`).MatchString(run.ImageRef) {
		t.Fatalf("imageRef %q, want the repo digest", run.ImageRef)
	}
	for i := 0; i < 2; i++ { // the second wait finds the recorded exit
		var st pluginapi.ExitStatus
		if err := p.Wait(pluginapi.IDArgs{ID: "c2"}, &st); err != nil || st.ExitCode != 4 {
			t.Fatalf("wait %d: %+v %v, want exit code 4", i, st, err)
		}
		b, _ := os.ReadFile(logPath) // no waiting: it is complete
		if !strings.Contains(string(b), " stdout F first\n") || !strings.HasSuffix(string(b), " stdout P last\n") {
			t.Fatalf("log at the exit:\n%s", b)
		}
	}
	var list pluginapi.ListReply
	if err := p.List(pluginapi.Empty{}, &list); err != nil || len(list.Containers) != 1 || list.Containers[0].Exit == nil ||
		list.Containers[0].Exit.ExitCode != 4 || list.Containers[0].Labels[pluginapi.LabelImageRef] != run.ImageRef {
		t.Fatalf("list after the exit: %+v %v", list, err)
	}
	if err := p.Remove(pluginapi.IDArgs{ID: "c2"}, &pluginapi.Empty{}); err != nil {
		t.Fatal(err)
	}
}

// The errors of a shim start another start raced (containerd 1.6's own
// wording, as logged) are tried again; other create errors are not.
func TestShimStartRaced(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		want bool
	}{
		{"failed to start shim: start failed: dial unix /run/containerd/s/0f2b: connect: no such file or directory: unknown", true},
		{"failed to start shim: create new shim socket: chmod /run/containerd/s/0f2b: no such file or directory: unknown", true},
		{"failed to create shim task: ttrpc: closed: unknown", true},
		{"failed to create shim task: OCI runtime create failed: exec: \"/nope\": stat /nope: no such file or directory: unknown", false},
		{"ttrpc: closed", false},
		{"image not found", false},
	} {
		if got := shimStartRaced(errors.New(tc.msg)); got != tc.want {
			t.Errorf("shimStartRaced(%q) = %v, want %v", tc.msg, got, tc.want)
		}
	}
}
