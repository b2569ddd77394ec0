// Package conformance ports the Kubernetes node conformance tests that
// apply to static pods on one node, and runs them against the real
// podvisor binary: one daemon per runtime, shared by the tests as a
// kubelet is by the e2e suite. README.md lists every upstream test
// considered and what became of it.
package conformance

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
)

const testImage = "podvisor.test/busybox:1"

var (
	binDir string // the built podvisor binaries
	nodes  = map[string]*node{"process": {kind: "process"}, "containerd": {kind: "containerd"}}
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The tests mostly wait on pods: run many at once even on 2 cores.
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		flag.Set("test.parallel", "24")
	}
	dir, err := os.MkdirTemp("", "podvisor-conformance")
	if err != nil {
		panic(err)
	}
	binDir = dir
	build := exec.Command("go", "build", "-o", dir, "github.com/podvisor/podvisor/cmd/podvisor",
		"github.com/podvisor/podvisor/cmd/podvisor-shim", "github.com/podvisor/podvisor/cmd/podvisor-containerd")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building podvisor: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	for _, n := range nodes {
		n.stop()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

// knownDefect skips a test that fails today because of the numbered item
// of issue 13. Remove the call when the fix merges; with
// PODVISOR_CONFORMANCE_ALL=1 the skipped tests run anyway, to see which
// fixes have landed.
func knownDefect(t *testing.T, item int, what string) {
	t.Helper()
	if os.Getenv("PODVISOR_CONFORMANCE_ALL") == "1" {
		t.Logf("known defect (issue 13 item %d: %s), run anyway", item, what)
		return
	}
	t.Skipf("issue 13 item %d: %s", item, what)
}

// prerequisite skips where something the test needs is missing, except
// in CI, where that is a failure.
func prerequisite(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI prerequisite missing: "+format, args...)
	}
	t.Skipf("prerequisite missing (fails in CI): "+format, args...)
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
		config += fmt.Sprintf("containerd: {address: %s, runcRoot: %s, sandboxDir: %s, cniConfDir: %s}\n",
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
// upstream scripts use, and waits until the daemon lists it.
func (n *node) loadImage() error {
	images := filepath.Join(n.data, "images")
	os.MkdirAll(images, 0o755)
	img := ociimage.Image{Name: testImage, Cmd: []string{"sh"}}
	for _, a := range []string{"wc", "awk", "sed", "cut", "tr", "printf", "seq", "expr", "stat", "sort", "chmod"} {
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
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", n.root))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", n.root))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left := false
		for _, d := range dirs {
			rmdirTree(d)
			left = left || exists(d)
		}
		if !left || time.Now().After(deadline) {
			break
		}
	}
	os.RemoveAll(n.dir)
}

func rmdirTree(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			rmdirTree(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// env is one test's view of a node.
type env struct {
	t *testing.T
	n *node
}

// onBoth runs f as a parallel subtest on each runtime: for behaviour the
// daemon decides, not the runtime.
func onBoth(t *testing.T, f func(t *testing.T, e *env)) {
	t.Parallel()
	for _, kind := range []string{"process", "containerd"} {
		t.Run(kind, func(t *testing.T) { runOn(t, kind, f) })
	}
}

// onProcess runs f on process pods only (the README says why).
func onProcess(t *testing.T, f func(t *testing.T, e *env)) {
	t.Parallel()
	t.Run("process", func(t *testing.T) { runOn(t, "process", f) })
}

// onContainerd runs f on containerd pods only (the README says why).
func onContainerd(t *testing.T, f func(t *testing.T, e *env)) {
	t.Parallel()
	t.Run("containerd", func(t *testing.T) { runOn(t, "containerd", f) })
}

func runOn(t *testing.T, kind string, f func(t *testing.T, e *env)) {
	t.Parallel()
	if os.Geteuid() != 0 {
		prerequisite(t, "needs root")
	}
	if fd, err := unix.PidfdOpen(os.Getpid(), 0); err != nil {
		prerequisite(t, "pidfd_open unavailable: %v", err)
	} else {
		unix.Close(fd)
	}
	if kind == "containerd" {
		ctrdtest.Require(t)
		if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
			prerequisite(t, "CNI plugins (Debian's containernetworking-plugins): %v", err)
		}
	}
	n := nodes[kind]
	n.once.Do(func() { n.err = n.start() })
	if n.err != nil {
		t.Fatalf("starting the %s node: %v", kind, n.err)
	}
	f(t, &env{t: t, n: n})
}

func (e *env) process() bool { return e.n.kind == "process" }

// create adapts an upstream pod to the runtime (process pods run host
// commands; containerd pods the busybox test image unless the test names
// another) and writes its
// manifest. The pod is deleted when the test ends.
func (e *env) create(p *v1.Pod) {
	e.t.Helper()
	p.APIVersion, p.Kind = "v1", "Pod"
	for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			if e.process() {
				cs[i].Image = "host"
			} else if cs[i].Image == "" {
				cs[i].Image, cs[i].ImagePullPolicy = testImage, v1.PullNever
			}
		}
	}
	if e.process() {
		p.Spec.RuntimeClassName = ptr("process")
	}
	data, err := yaml.Marshal(p)
	if err != nil {
		e.t.Fatal(err)
	}
	name := p.Name + ".yaml"
	tmp := filepath.Join(e.n.manifests(), "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.n.manifests(), name)); err != nil {
		e.t.Fatal(err)
	}
	// A manifest the daemon refuses is never listed: say so now, with
	// the daemon's reason, rather than time out waiting for a state.
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if list, err := e.n.client.Pods(context.Background()); err == nil && hasPod(list.Items, p.Name) {
			break
		}
		if time.Now().After(end) {
			e.t.Fatalf("pod %s: not listed within 10s of writing its manifest:\n%s", p.Name, grepLog(e.n.log(), p.Name))
		}
	}
	e.t.Cleanup(func() {
		if exists(filepath.Join(e.n.manifests(), name)) {
			if g := p.Spec.TerminationGracePeriodSeconds; g != nil && *g > 30 {
				// Upstream's cleanup deletes with grace 0: do not wait
				// out a long grace period.
				os.Remove(filepath.Join(e.n.manifests(), name))
				// Delete only once the removal is seen: before, the
				// manifest would start the pod again.
				e.waitPod(p.Name, 10*time.Second, "terminating after its manifest was removed", func(p *v1.Pod) bool { return p.DeletionTimestamp != nil })
				if _, err := e.n.client.Delete(context.Background(), "default", p.Name, ptr(int64(0)), true); err != nil {
					e.t.Logf("force-deleting pod %s: %v", p.Name, err)
				}
				e.waitGone(p.Name, 60*time.Second)
			} else {
				e.delete(p.Name)
			}
		}
		if e.t.Failed() {
			e.t.Logf("%s daemon log, lines about pod %s and warnings:\n%s", e.n.kind, p.Name, grepLog(e.n.log(), p.Name))
		}
	})
}

func hasPod(pods []v1.Pod, name string) bool {
	for _, p := range pods {
		if p.Name == name {
			return true
		}
	}
	return false
}

// unsupported skips a test of a feature podvisor refuses by design or
// does not have, which issue 13 does not list; README.md says which.
func unsupported(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("PODVISOR_CONFORMANCE_ALL") == "1" {
		t.Logf("unsupported (%s), run anyway", what)
		return
	}
	t.Skipf("not supported by podvisor (not an issue 13 item): %s", what)
}

// delete removes the pod's manifest and waits until the pod is gone.
func (e *env) delete(name string) {
	e.t.Helper()
	if err := os.Remove(filepath.Join(e.n.manifests(), name+".yaml")); err != nil {
		e.t.Fatal(err)
	}
	e.waitGone(name, 60*time.Second)
}

// scratch gives the pod's containers a directory that outlives their
// restarts, at mountPath: an emptyDir on containerd, a host directory
// for process pods (which take no volumes). It returns the path the
// containers use.
func (e *env) scratch(p *v1.Pod, medium v1.StorageMedium, mountPath string) string {
	if e.process() {
		return e.hostDir()
	}
	p.Spec.Volumes = append(p.Spec.Volumes, v1.Volume{Name: "scratch",
		VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{Medium: medium}}})
	for _, cs := range [][]v1.Container{p.Spec.InitContainers, p.Spec.Containers} {
		for i := range cs {
			cs[i].VolumeMounts = append(cs[i].VolumeMounts, v1.VolumeMount{Name: "scratch", MountPath: mountPath})
		}
	}
	return mountPath
}

// hostDir is a directory any user can write, removed when the test ends
// (t.TempDir's parent is closed to other users).
func (e *env) hostDir() string {
	dir, err := os.MkdirTemp("", "pvc-pod")
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o777); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

// port is a TCP port for a server in the pod: any free port for process
// pods (they share the host's network), the upstream one on containerd.
func (e *env) port(upstream int) int {
	if !e.process() {
		return upstream
	}
	l, err := net.Listen("tcp", ":0")
	if err != nil {
		e.t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitPod waits, through the API's watch, until cond holds for the pod.
func (e *env) waitPod(name string, timeout time.Duration, what string, cond func(p *v1.Pod) bool) *v1.Pod {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var version uint64
	var last *v1.Pod
	for {
		list, err := e.n.client.WatchPods(ctx, version)
		if err != nil {
			e.t.Fatalf("pod %s: not within %v: %s (last seen: %s)", name, timeout, what, describe(last))
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

// consistently fails if cond stops holding for the pod within d.
func (e *env) consistently(name string, d time.Duration, what string, cond func(p *v1.Pod) bool) {
	e.t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		p := e.get(name)
		if !cond(p) {
			e.t.Fatalf("pod %s: %s stopped holding within %v: %s", name, what, d, describe(p))
		}
	}
}

func (e *env) get(name string) *v1.Pod {
	e.t.Helper()
	list, err := e.n.client.Pods(context.Background())
	if err != nil {
		e.t.Fatal(err)
	}
	for i := range list.Items {
		if list.Items[i].Name == name {
			return &list.Items[i]
		}
	}
	e.t.Fatalf("pod %s is not listed", name)
	return nil
}

// waitGone waits until no pod with the name is listed.
func (e *env) waitGone(name string, timeout time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var version uint64
	for {
		list, err := e.n.client.WatchPods(ctx, version)
		if err != nil {
			e.t.Fatalf("pod %s still listed %v after its manifest was removed", name, timeout)
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

// logs returns a container's log.
func (e *env) logs(pod *v1.Pod, container string) string {
	e.t.Helper()
	var out bytes.Buffer
	if err := e.n.client.Log(context.Background(), pod.Namespace, pod.Name, container, false, false, &out); err != nil {
		e.t.Fatalf("logs of %s/%s: %v", pod.Name, container, err)
	}
	return out.String()
}

// waitLog waits until a container's log matches.
func (e *env) waitLog(pod *v1.Pod, container string, timeout time.Duration, what string, match func(string) bool) string {
	e.t.Helper()
	var out bytes.Buffer
	for end := time.Now().Add(timeout); ; time.Sleep(200 * time.Millisecond) {
		out.Reset()
		err := e.n.client.Log(context.Background(), pod.Namespace, pod.Name, container, false, false, &out)
		if err == nil && match(out.String()) {
			return out.String()
		}
		if time.Now().After(end) {
			e.t.Fatalf("log of %s/%s: not within %v: %s (log: %q, err: %v)", pod.Name, container, timeout, what, out.String(), err)
		}
	}
}

func (e *env) events(pod *v1.Pod) []api.Event {
	e.t.Helper()
	ev, err := e.n.client.Events(context.Background(), pod.Namespace, pod.Name)
	if err != nil {
		e.t.Fatal(err)
	}
	return ev
}

// cli runs a podvisor client command against the node.
func (e *env) cli(args ...string) (string, string, int) {
	end := len(args)
	for i, a := range args {
		if a == "--" {
			end = i
			break
		}
	}
	args = append(append(append([]string{}, args[:end]...), "--socket", e.n.socket), args[end:]...)
	cmd := exec.Command(filepath.Join(binDir, "podvisor"), args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func describe(p *v1.Pod) string {
	if p == nil {
		return "never listed"
	}
	s := fmt.Sprintf("phase=%s reason=%q conditions=%v", p.Status.Phase, p.Status.Reason, conditionsOf(p))
	for _, c := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		s += fmt.Sprintf(" [%s ready=%v started=%v restarts=%d state=%s last=%s]", c.Name, c.Ready, c.Started != nil && *c.Started,
			c.RestartCount, stateString(c.State), stateString(c.LastTerminationState))
	}
	return s
}

func conditionsOf(p *v1.Pod) string {
	var s []string
	for _, c := range p.Status.Conditions {
		s = append(s, fmt.Sprintf("%s=%s(%s)", c.Type, c.Status, c.Reason))
	}
	return strings.Join(s, ",")
}

func stateString(s v1.ContainerState) string {
	switch {
	case s.Running != nil:
		return "running"
	case s.Waiting != nil:
		return "waiting(" + s.Waiting.Reason + ")"
	case s.Terminated != nil:
		return fmt.Sprintf("terminated(%s,%d,%q)", s.Terminated.Reason, s.Terminated.ExitCode, s.Terminated.Message)
	}
	return "none"
}

// grepLog picks the shared daemon log's lines about one pod, and its
// warnings and errors.
func grepLog(log, pod string) string {
	var keep []string
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "/"+pod+" ") || strings.Contains(l, "/"+pod+".yaml") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func ptr[T any](v T) *T { return &v }
