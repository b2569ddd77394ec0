package conformance

// A test's view of a node: pods created from manifests, waits that say
// what they waited for, and the local API's logs, events and exec.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/test/ctrdtest"
)

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
				e.waitRemovalSeen(p.Name)
				if _, err := e.n.client.Delete(context.Background(), "default", p.Name, ptr(int64(0)), true); err != nil && e.listed(p.Name) {
					e.t.Logf("force-deleting pod %s: %v", p.Name, err)
				}
				e.waitGone(p.Name, 60*time.Second)
			} else {
				e.delete(p.Name)
			}
		}
		if e.t.Failed() {
			log := e.n.log()
			e.t.Logf("%s daemon log, lines about pod %s and warnings:\n%s", e.n.kind, p.Name, grepLog(log, p.Name))
			if e.n.ctrd != nil {
				e.t.Logf("containerd's warnings and errors since:\n%s", ctrdWarnings(e.n.ctrd.Log(), log, p.Name))
			}
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

// waitRemovalSeen waits until the daemon has seen a manifest's removal:
// the pod terminates or is gone.
func (e *env) waitRemovalSeen(name string) {
	e.t.Helper()
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		list, err := e.n.client.Pods(context.Background())
		if err != nil {
			e.t.Fatal(err)
		}
		// A finished pod's phase says nothing about the removal: it is
		// seen when the pod is gone (a finished pod is forgotten at once)
		// or terminating.
		seen := true
		for _, p := range list.Items {
			if p.Name == name {
				seen = p.DeletionTimestamp != nil
			}
		}
		if seen {
			return
		}
		if time.Now().After(end) {
			e.t.Fatalf("pod %s: not within 10s: terminating after its manifest was removed", name)
		}
	}
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
			state := "(gone from the list)"
			if all, err := e.n.client.Pods(context.Background()); err == nil {
				for i := range all.Items {
					if all.Items[i].Name == name {
						b, _ := json.MarshalIndent(all.Items[i].Status, "", "  ")
						state = string(b)
					}
				}
			}
			e.t.Fatalf("pod %s still listed %v after its manifest was removed; its status:\n%s\n%s daemon log, lines about it and warnings:\n%s",
				name, timeout, state, e.n.kind, grepLog(e.n.log(), name))
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

// grepLog picks the shared daemon log's lines about one pod, and the
// warnings and errors not about another pod logged from the pod's first
// line on (the runtime plugin's among them): a stall of the runtime shows
// there, not on the pod's lines.
func grepLog(log, pod string) string {
	var keep []string
	var others int
	since := ""
	for _, l := range strings.Split(log, "\n") {
		about := strings.Contains(l, "/"+pod+" ") || strings.Contains(l, "/"+pod+".yaml")
		if about && since == "" {
			since = logTime(l)
		}
		switch {
		case about:
			keep = append(keep, l)
		case since != "" && logTime(l) >= since && !strings.Contains(l, " pod=") &&
			(strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR")):
			if others++; others <= maxOtherLines {
				keep = append(keep, l)
			}
		}
	}
	if others > maxOtherLines {
		keep = append(keep, fmt.Sprintf("(%d more warnings and errors)", others-maxOtherLines))
	}
	return strings.Join(keep, "\n")
}

// maxOtherLines bounds the lines not about the pod a failure shows.
const maxOtherLines = 40

// logTime is a log line's time= value (RFC 3339, so it sorts as text),
// or "" without one. containerd writes it quoted.
func logTime(l string) string {
	_, rest, ok := strings.Cut(l, "time=")
	if !ok {
		return ""
	}
	rest = strings.TrimPrefix(rest, `"`)
	if i := strings.IndexAny(rest, `" `); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

// ctrdWarnings is the test containerd's warnings and errors from the
// pod's first daemon log line on, at most maxOtherLines of them.
func ctrdWarnings(ctrdLog, daemonLog, pod string) string {
	since := ""
	for _, l := range strings.Split(daemonLog, "\n") {
		if strings.Contains(l, "/"+pod+" ") || strings.Contains(l, "/"+pod+".yaml") {
			since = logTime(l)
			break
		}
	}
	var keep []string
	for _, l := range strings.Split(ctrdLog, "\n") {
		if since != "" && logTime(l) >= since && (strings.Contains(l, "level=warning") || strings.Contains(l, "level=error")) {
			keep = append(keep, l)
		}
	}
	if len(keep) > maxOtherLines {
		keep = append(keep[len(keep)-maxOtherLines:], fmt.Sprintf("(the last %d of %d)", maxOtherLines, len(keep)))
	}
	return strings.Join(keep, "\n")
}

func ptr[T any](v T) *T { return &v }
