// Package e2e runs the real podvisor binary against real processes.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/test/prereq"
	"github.com/podvisor/podvisor/test/shipped"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "podvisor-e2e")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "podvisor")
	if prebuilt := os.Getenv("PODVISOR_E2E_BIN"); prebuilt != "" {
		// Built beforehand, where there is no Go toolchain (the VM tests).
		binary = filepath.Join(prebuilt, "podvisor")
		code := m.Run()
		os.RemoveAll(dir)
		os.Exit(code)
	}
	// The binaries side by side as installed (the daemon finds its shim),
	// built as they ship.
	if err := shipped.Build(dir, "podvisor", "podvisor-shim", "podvisor-containerd", "podhub"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	build := exec.Command("go", "build", "-o", dir, "github.com/podvisor/podvisor/test/hog")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building test/hog: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// requirePidfd skips where the kernel lacks pidfds, except in CI where a
// missing prerequisite is a failure.
func requirePidfd(t *testing.T) {
	fd, err := unix.PidfdOpen(os.Getpid(), 0)
	if err == nil {
		unix.Close(fd)
		return
	}
	prerequisite(t, "pidfd_open unavailable: %v", err)
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		prerequisite(t, "needs root")
	}
}

func prerequisite(t *testing.T, format string, args ...any) {
	t.Helper()
	prereq.Missing(t, format, args...)
}

// daemon is one podvisor run with its own directories.
type daemon struct {
	t          *testing.T
	dir        string
	manifests  string
	data       string
	socket     string
	config     string
	configText string
	extraArgs  []string // appended to podvisor run's
	bin        string   // the podvisor it runs and its CLI, if not the one under test
	cmd        *exec.Cmd
	log        *bytes.Buffer
	client     *api.Client
}

func newDaemon(t *testing.T) *daemon {
	requirePidfd(t)
	dir := t.TempDir()
	d := &daemon{t: t, dir: dir, manifests: filepath.Join(dir, "manifests"),
		data: filepath.Join(dir, "data"), socket: filepath.Join(dir, "pv.sock")}
	os.MkdirAll(d.manifests, 0o755)
	d.client = api.NewClient(d.socket)
	t.Cleanup(d.cleanup)
	return d
}

// withConfig sets config file content for later starts.
func (d *daemon) withConfig(yaml string) { d.configText = yaml }

// volumeFile is a path in pod p's volume as the host holds it (podfs:
// <data>/pods/<uid>/volumes/<name>), the directory its containers mount.
func (d *daemon) volumeFile(p *v1.Pod, volume string, elem ...string) string {
	return filepath.Join(append([]string{d.data, "pods", string(p.UID), "volumes", volume}, elem...)...)
}

// writeConfig writes the config file, giving the daemon a cgroup root of
// its own unless the test chose one.
func (d *daemon) writeConfig() {
	text := d.configText
	if !strings.Contains(text, "cgroups:") {
		text += "cgroups: {root: " + d.cgroupRoot(filepath.Base(d.dir)) + "}\n"
	}
	d.config = filepath.Join(d.dir, "config.yaml")
	if err := os.WriteFile(d.config, []byte(text), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

func (d *daemon) start() {
	d.t.Helper()
	if d.config == "" {
		d.writeConfig()
	}
	if err := d.tryStart(10 * time.Second); err != nil {
		d.t.Fatal(err)
	}
}

// tryStart starts the daemon (its config written) and waits for its API;
// unlike start, it may run outside the test's goroutine.
func (d *daemon) tryStart(within time.Duration) error {
	args := []string{"run", "--manifests", d.manifests, "--data-dir", d.data, "--socket", d.socket, "--config", d.config}
	args = append(args, d.extraArgs...)
	d.cmd = exec.Command(d.exe(), args...)
	d.log = &bytes.Buffer{}
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		return err
	}
	deadline := time.Now().Add(within)
	for {
		if _, err := d.client.Version(context.Background()); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			// Go prints every goroutine's stack on SIGQUIT: show where
			// the daemon is stuck.
			d.cmd.Process.Signal(syscall.SIGQUIT)
			time.Sleep(500 * time.Millisecond)
			return fmt.Errorf("daemon did not come up:\n%s", d.log)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// exe is the podvisor binary the daemon runs: the one under test unless
// the test chose another release's.
func (d *daemon) exe() string {
	if d.bin != "" {
		return d.bin
	}
	return binary
}

// stop sends sig to the daemon and waits for it to exit.
func (d *daemon) stop(sig syscall.Signal) {
	d.t.Helper()
	if d.cmd == nil {
		return
	}
	d.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- d.cmd.Wait() }()
	// A daemon finishes recovering before it stops, and recovery may wait
	// up to 10 s for a shim to describe itself, and 10 s more for one
	// killed to let go of its lock (a loaded CI machine took over 15 s).
	select {
	case <-done:
	case <-time.After(40 * time.Second):
		d.cmd.Process.Kill()
		d.t.Fatalf("daemon did not exit on %v:\n%s", sig, d.log)
	}
	d.cmd = nil
}

// cleanup stops the daemon and kills every shim it left, so tests do not
// leak processes into each other.
func (d *daemon) cleanup() {
	d.kill()
	// The private specs' tmpfs stays mounted as long as the device runs
	// (a restarted daemon or keeper needs it): the test ends it.
	for _, m := range mountsUnder(d.t, filepath.Join(d.data, "private")) {
		unix.Unmount(m, unix.MNT_DETACH)
	}
	if d.t.Failed() && d.log != nil {
		d.t.Logf("daemon log:\n%s", d.log)
	}
}

// kill stops the daemon with SIGKILL and kills every shim it left. It may
// run more than once: every cleanup that removes what the daemon's pods
// hold (cgroups, mounts, containers) calls it first, whatever order
// t.Cleanup runs them in, so the daemon restarts nothing behind it.
func (d *daemon) kill() {
	d.stop(syscall.SIGKILL)
	out, _ := exec.Command("pgrep", "-f", shimPattern(d)).Output()
	var killed []int
	for _, f := range strings.Fields(string(out)) {
		var pid int
		fmt.Sscan(f, &pid)
		syscall.Kill(pid, syscall.SIGKILL) // leaders die with their shim or keeper (pdeathsig)
		killed = append(killed, pid)
	}
	// Gone, not only signalled: a keeper still dying may finish a write
	// into an instance directory while the test's temp dir is removed.
	for _, pid := range killed {
		deadline := time.Now().Add(10 * time.Second)
		for !exited(pid) && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !exited(pid) {
			d.t.Errorf("shim or keeper %d still alive 10 s after SIGKILL", pid)
		}
	}
}

// exited: the process is gone or a zombie (it runs no more code).
func exited(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which ends at the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] == 'Z' || stat[i+2] == 'X'
}

// shimPattern matches (pgrep -f) the daemon's shims and its keeper.
func shimPattern(d *daemon) string { return "podvisor-shim (--keeper )?" + d.data }

func (d *daemon) write(name, content string) {
	d.t.Helper()
	// Written whole through a rename, as configuration tools do.
	writeWhole(d.t, filepath.Join(d.manifests, name), content)
}

// writeWhole writes path through a rename beside it: a reader, polling
// or watching, never sees it created but not yet written.
func writeWhole(t *testing.T, path, content string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func (d *daemon) remove(name string) {
	if err := os.Remove(filepath.Join(d.manifests, name)); err != nil {
		d.t.Fatal(err)
	}
}

// cli runs a client command and returns stdout, stderr and the exit code.
func (d *daemon) cli(args ...string) (string, string, int) {
	// Flags go before a "--" that ends them (exec).
	end := len(args)
	for i, a := range args {
		if a == "--" {
			end = i
			break
		}
	}
	args = append(append(append([]string{}, args[:end]...), "--socket", d.socket), args[end:]...)
	cmd := exec.Command(d.exe(), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// waitPod waits, through the API's watch, until cond holds for the pod.
func (d *daemon) waitPod(name string, timeout time.Duration, cond func(p *v1.Pod) bool) *v1.Pod {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var version uint64
	var last *v1.Pod
	for {
		list, err := d.client.WatchPods(ctx, version)
		if err != nil {
			// The condition is the caller's: name where it is written.
			_, file, line, _ := runtime.Caller(1)
			d.t.Fatalf("pod %s: the condition at %s:%d not met within %v (last seen: %s)", name, filepath.Base(file), line, timeout, describePod(last))
		}
		fmt.Sscan(list.ResourceVersion, &version)
		for i := range list.Items {
			if p := &list.Items[i]; p.Name == name {
				last = p
				if cond(p) {
					return p
				}
			}
		}
	}
}

// waitGone waits until no pod with the name is listed.
func (d *daemon) waitGone(name string, timeout time.Duration) {
	d.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var version uint64
	for {
		list, err := d.client.WatchPods(ctx, version)
		if err != nil {
			d.t.Fatalf("pod %s still listed after %v", name, timeout)
		}
		fmt.Sscan(list.ResourceVersion, &version)
		found := false
		for _, p := range list.Items {
			found = found || p.Name == name
		}
		if !found {
			return
		}
	}
}

// waitFor waits up to 10 s for cond; on timeout the test fails saying
// what it waited for.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitForLong(t, 10*time.Second, what, cond)
}

// waitForLong waits up to d for cond, naming what it waited for.
func waitForLong(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitForValue waits up to d until ok holds for what observe returns; on
// timeout the test fails naming what it waited for and the last value
// observed.
func waitForValue[T any](t *testing.T, d time.Duration, what string, observe func() T, ok func(T) bool) T {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		v := observe()
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s (last observed: %v)", d, what, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func describePod(p *v1.Pod) string {
	if p == nil {
		return "never listed"
	}
	s := fmt.Sprintf("phase=%s reason=%s", p.Status.Phase, p.Status.Reason)
	for _, c := range p.Status.ContainerStatuses {
		s += fmt.Sprintf(" [%s restarts=%d state=%+v]", c.Name, c.RestartCount, c.State)
	}
	return s
}

func running(p *v1.Pod) bool {
	return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil
}

// processPod is a manifest for a process pod running one shell script.
func processPod(name, restartPolicy string, grace int, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  runtimeClassName: process
  restartPolicy: %s
  terminationGracePeriodSeconds: %d
  containers:
  - name: main
    image: host
    command: ["sh", "-c", %q]
`, name, restartPolicy, grace, script)
}

// readLines returns the lines of a file written by a test workload.
func readLines(path string) []string {
	data, _ := os.ReadFile(path)
	return strings.Fields(string(data))
}

func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func writeString(path, s string) error { return os.WriteFile(path, []byte(s), 0o644) }

// freeLoopback is a free address on 127.0.0.1 for a server a test starts.
func freeLoopback(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}
