package failover

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/test/syncbuf"
)

// realDaemon is a real podvisor daemon enrolled with the hub (podhub
// device add, the NATS nodes' URLs), running process pods as root in a
// cgroup root of its own. The test's cleanup stops it, kills what its
// pods left and removes its cgroups and mounts.
type realDaemon struct {
	t      *testing.T
	id     string
	dir    string
	data   string
	socket string
	cgroup string
	cmd    *exec.Cmd
	log    *syncbuf.Buffer
	exited chan struct{}
	client *api.Client
}

// startDaemon enrols device id through the replica r and starts its
// daemon, waiting for its API.
func startDaemon(t *testing.T, r *hubReplica, id string, brokers []string) *realDaemon {
	t.Helper()
	dir := t.TempDir()
	d := &realDaemon{t: t, id: id, dir: dir, data: filepath.Join(dir, "data"), socket: filepath.Join(dir, "pv.sock"),
		cgroup: fmt.Sprintf("podvisor-failover-%d-%s", os.Getpid(), id), log: &syncbuf.Buffer{}}
	d.client = api.NewClient(d.socket)
	bundle := filepath.Join(dir, "hub")
	if out, err := r.cli("device", "add", id, "--out", bundle, "--install-dir", bundle, "--url", strings.Join(brokers, ",")); err != nil {
		t.Fatalf("podhub device add %s: %v\n%s", id, err, out)
	}
	hubConf, err := os.ReadFile(filepath.Join(bundle, "podvisor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// The hub's process pods run here, as root (the test's); the
	// bundle's config ends inside its hub: section.
	conf := string(hubConf) + "  allowProcessPods: true\n  allowRootProcessPods: true\n" + "cgroups: {root: " + d.cgroup + "}\n"
	config := filepath.Join(dir, "config.yaml")
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(config, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	d.cmd = exec.Command(podvisorBin(), "run", "--manifests", manifests, "--data-dir", d.data, "--socket", d.socket, "--config", config)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.exited = make(chan struct{})
	cmd, exited := d.cmd, d.exited
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(d.cleanup)
	waitFor(t, 30*time.Second, id+"'s daemon API", func() bool {
		select {
		case <-exited:
			t.Fatalf("daemon %s exited:\n%s", id, lastLines(d.log.String(), 40))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := d.client.Version(ctx)
		return err == nil
	})
	return d
}

// pod is the daemon's view of pod default/name, or nil.
func (d *realDaemon) pod(name string) *v1.Pod {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := d.client.Pods(ctx)
	if err != nil {
		return nil
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Name == name && p.Namespace == "default" {
			return p
		}
	}
	return nil
}

// runsApp tells whether a pod labelled app=app runs on the daemon.
func (d *realDaemon) runsApp(app string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := d.client.Pods(ctx)
	if err != nil {
		return false
	}
	for i := range list.Items {
		if p := &list.Items[i]; p.Labels["app"] == app && running(p) {
			return true
		}
	}
	return false
}

// running tells whether the pod's first container runs.
func running(p *v1.Pod) bool {
	return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil
}

// connects counts the daemon's connections to the hub so far (its log).
func (d *realDaemon) connects() int { return strings.Count(d.log.String(), "connected to the hub") }

// cleanup stops the daemon (SIGKILL: its pods are the test's to end),
// kills its shims and keeper and every process left in its cgroups,
// removes the cgroups and unmounts what is left under its directory.
func (d *realDaemon) cleanup() {
	if d.cmd != nil {
		d.cmd.Process.Kill()
		<-d.exited
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		c, err := os.ReadFile(p)
		if err == nil && bytes.Contains(c, []byte("podvisor-shim")) && bytes.Contains(c, []byte(d.data)) {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if left := removeCgroups(d.cgroup); len(left) > 0 {
		d.t.Errorf("%s: cgroups left behind: %v", d.id, left)
	}
	for _, m := range mountsUnder(d.dir) {
		unix.Unmount(m, unix.MNT_DETACH)
	}
	if d.t.Failed() {
		d.t.Logf("daemon %s log (last 40 lines):\n%s", d.id, lastLines(d.log.String(), 40))
	}
}

// removeCgroups kills every process in the cgroup tree root in every
// hierarchy and removes its directories, deepest first, retrying for up
// to 10 s while the killed processes exit; it returns what it could not
// remove.
func removeCgroups(root string) []string {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", root))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", root))
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		left = nil
		for _, dir := range dirs {
			var tree []string
			filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					tree = append(tree, p)
				}
				return nil
			})
			for i := len(tree) - 1; i >= 0; i-- {
				if procs, err := os.ReadFile(filepath.Join(tree[i], "cgroup.procs")); err == nil {
					for _, f := range strings.Fields(string(procs)) {
						var pid int
						fmt.Sscan(f, &pid)
						syscall.Kill(pid, syscall.SIGKILL)
					}
				}
				if err := os.Remove(tree[i]); err != nil && !os.IsNotExist(err) {
					left = append(left, tree[i])
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

// mountsUnder lists the mount points at or below dir, the last mounted
// first.
func mountsUnder(dir string) []string {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append([]string{f[4]}, out...)
		}
	}
	return out
}

// pidOf is the PID of the process whose command line holds every one of
// words (a process pod's unique command), or 0.
func pidOf(words ...string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		c, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		line := string(bytes.ReplaceAll(c, []byte{0}, []byte{' '}))
		all := true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if all && !strings.Contains(line, "podvisor") {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			return pid
		}
	}
	return 0
}
