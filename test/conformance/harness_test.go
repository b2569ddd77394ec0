// Package conformance ports the Kubernetes node conformance tests that
// apply to static pods on one node, and runs them against the real
// podvisor binary: one daemon per runtime, shared by the tests as a
// kubelet is by the e2e suite. README.md lists every upstream test
// considered and what became of it.
package conformance

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/test/cgrouptree"
	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/prereq"
	"github.com/podvisor/podvisor/test/shipped"
)

const testImage = "podvisor.test/busybox:1"

var (
	binDir  string // the built podvisor binaries
	agnhost string // the built test server (test/conformance/agnhost)
	nodes   = map[string]*node{"process": {kind: "process"}, "containerd": {kind: "containerd"}}
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests mostly wait on pods: run many at once even on 2 cores,
	// but not so many that runc's creates and execs crowd out the
	// timings the tests assert (1 s exec probes, hooks started together):
	// at 24 the whole package took 5 min beside the e2e package's 14,
	// with probes timing out; at 12 it still ends before e2e does.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "12")
	}
	dir, err := os.MkdirTemp("", "podvisor-conformance")
	if err != nil {
		panic(err)
	}
	binDir = dir
	// Process pods that run as a non-root user run agnhost from here.
	if err := os.Chmod(dir, 0o755); err != nil {
		panic(err)
	}
	if err := shipped.Build(dir, "podvisor", "podvisor-shim", "podvisor-containerd"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The gRPC and HTTPS servers upstream takes from agnhost, stripped:
	// it goes into the containerd test image too.
	agnhost = filepath.Join(dir, "agnhost")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", agnhost, "github.com/podvisor/podvisor/test/conformance/agnhost")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building agnhost: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	for _, n := range nodes {
		n.stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// prerequisite skips where something the test needs is missing, except
// in CI, where that is a failure.
func prerequisite(t *testing.T, format string, args ...any) {
	t.Helper()
	prereq.Missing(t, format, args...)
}

// node is one podvisor daemon with its own directories and cgroup root,
// started by the first test that needs it and stopped, with everything
// it ran, after the last.
type node struct {
	kind   string // process | containerd
	once   sync.Once
	err    error
	dir    string
	data   string
	socket string
	root   string // cgroup root
	cmd    *exec.Cmd
	ctrd   *ctrdtest.Containerd
	client *api.Client
}

func (n *node) start() error {
	dir, err := os.MkdirTemp("", "pvc-"+n.kind)
	if err != nil {
		return err
	}
	n.dir, n.data, n.socket = dir, filepath.Join(dir, "data"), filepath.Join(dir, "pv.sock")
	n.root = fmt.Sprintf("podvisor-conformance-%d-%s", os.Getpid(), n.kind)
	os.MkdirAll(n.manifests(), 0o755)
	// Short backoff: the tests see restarts in seconds, not minutes.
	config := "backoff: {initial: 1s, max: 4s, reset: 10m}\ncgroups: {root: " + n.root + "}\n"
	if n.kind == "containerd" {
		if n.ctrd, err = ctrdtest.Launch(); err != nil {
			return err
		}
		// A shim per container: the runc shim of containerd 1.x (Debian
		// 12 ships 1.6.20) holds its service lock through the whole of a
		// create's runc, so with the device's one shim every container's
		// state, exec and start waited behind every other pod's create
		// (40-95 s at this suite's 24 tests at once), and it starts
		// execs one after another, so with a shim per pod the preStop
		// hooks of a pod's sidecars started 0.5 s apart each on 2 busy
		// cores, not at once. containerd 2 does neither. The device
		// default and the pod's shim are tested by the e2e tests
		// (docs/containerd.md).
		config += fmt.Sprintf("containerd: {address: %s, runcRoot: %s, sandboxDir: %s, cniConfDir: %s, shimGroup: container}\n",
			n.ctrd.Address, n.ctrd.RuncRoot(), filepath.Join(dir, "sandbox"), filepath.Join(dir, "cni"))
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(config), 0o644); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	n.cmd = exec.Command(filepath.Join(binDir, "podvisor"), "run", "--manifests", n.manifests(), "--data-dir", n.data,
		"--socket", n.socket, "--config", filepath.Join(dir, "config.yaml"))
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	// The daemon dies with the test binary even when a timeout or a
	// closed pipe kills it before TestMain can clean up. Pdeathsig follows
	// the starting thread: keep it locked while starting (the thread
	// stays in the runtime's pool afterwards).
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	err = n.cmd.Start()
	runtime.UnlockOSThread()
	if err != nil {
		return err
	}
	n.client = api.NewClient(n.socket)
	up := false
	for deadline := time.Now().Add(20 * time.Second); !up && time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		_, err := n.client.Version(context.Background())
		up = err == nil
	}
	if !up {
		return fmt.Errorf("the %s daemon's API did not answer within 20s:\n%s", n.kind, n.log())
	}
	if n.kind == "containerd" {
		return n.loadImage()
	}
	return nil
}

// loadImage side-loads the busybox test image, with the applets the
// upstream scripts use and /bin/agnhost, and waits until the daemon
// lists it.
func (n *node) loadImage() error {
	images := filepath.Join(n.data, "images")
	os.MkdirAll(images, 0o755)
	img := ociimage.Image{Name: testImage, Cmd: []string{"sh"}, Files: map[string]string{"agnhost": agnhost}}
	for _, a := range []string{"wc", "awk", "sed", "cut", "tr", "printf", "seq", "expr", "stat", "sort", "chmod", "hexdump"} {
		found := false
		for _, have := range ociimage.Applets {
			found = found || have == a
		}
		if !found {
			ociimage.Applets = append(ociimage.Applets, a)
		}
	}
	if err := ociimage.WriteFile(filepath.Join(images, "busybox.tar"), img); err != nil {
		return err
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		list, err := n.client.Images(context.Background())
		if err == nil && strings.Contains(fmt.Sprint(list), testImage) {
			return nil
		}
	}
	return fmt.Errorf("the containerd daemon did not list the side-loaded image %s within 30s:\n%s", testImage, n.log())
}

func (n *node) manifests() string { return filepath.Join(n.dir, "manifests") }

func (n *node) log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "daemon.log"))
	return string(b)
}

// stop kills the daemon and everything it ran, and removes its cgroups,
// mounts and files.
func (n *node) stop() {
	if n.cmd == nil {
		return
	}
	n.cmd.Process.Kill()
	n.cmd.Wait()
	out, _ := exec.Command("pgrep", "-f", "podvisor-shim "+n.data).Output()
	for _, f := range strings.Fields(string(out)) {
		var pid int
		fmt.Sscan(f, &pid)
		syscall.Kill(pid, syscall.SIGKILL) // leaders die with their shim (pdeathsig)
	}
	inits, _ := filepath.Glob(filepath.Join(n.dir, "sandbox", "*", "pid.init"))
	for _, f := range inits {
		var pid int
		if b, err := os.ReadFile(f); err == nil {
			if _, err := fmt.Sscan(string(b), &pid); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	if n.ctrd != nil {
		n.ctrd.Close()
	}
	exec.Command("sh", "-c", "grep "+n.dir+" /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r umount -l").Run()
	// Killed processes leave their cgroups a moment later.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if !cgrouptree.RemoveEmpty(n.root) || time.Now().After(deadline) {
			break
		}
	}
	os.RemoveAll(n.dir)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
