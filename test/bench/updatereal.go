package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	supervisorapi "github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// The real device's knobs in the fleet self-update benchmark.
var (
	updateReal     = flag.Bool("update-real", false, "add one real podvisor daemon (this tree, stamped v1.0.0, with process pods) to the fleet self-update; the release is this tree stamped v2.0.0")
	updateRealPods = flag.Int("update-real-pods", 10, "the real device's sleeping process pods (a heartbeat pod besides)")
)

// The versions of the self-update benchmark: what every device runs at
// start and the release it is updated to.
const (
	updateFrom = "v1.0.0"
	updateTo   = "v2.0.0"
)

// heartbeatPeriod is how often the real device's heartbeat container
// writes a timestamp: a gap much longer than it is the container stopped.
const heartbeatPeriod = 100 * time.Millisecond

// buildStamped builds podvisor, podvisor-shim and podvisor-containerd of
// this tree into dir as make build does (packaging/buildflags.sh), stamped
// with version: the packaged binaries of a device, or a release's.
func buildStamped(dir, version string) error {
	for _, name := range protocol.AgentArtifacts {
		flags, err := exec.Command("sh", "packaging/buildflags.sh", name).Output()
		if err != nil {
			return fmt.Errorf("packaging/buildflags.sh %s (run the bench from the repository's root): %v", name, err)
		}
		args := append([]string{"build", "-trimpath"}, strings.Fields(string(flags))...)
		args = append(args, "-ldflags", "-s -w -X main.version="+version, "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s %s: %v %s", name, version, err, out)
		}
	}
	return nil
}

// realMember is a real podvisor daemon in the update's fleet: its
// packaged binary (stamped updateFrom) in a directory of its own,
// enrolled with the bench's podhub as an operator does (podhub device
// add), running process pods from its manifest directory, one of which
// writes a timestamp every heartbeatPeriod. Started by the bench, not
// systemd: the restart into the new version executes in the same
// process, so the bench's child stays the daemon.
type realMember struct {
	id       string
	podhub   string
	ph       *podhubServe
	dir      string // everything of the device: binaries, config, data, pods' files
	packaged string // the packaged podvisor
	data     string
	socket   string
	cgroup   string // its cgroup root's name
	pods     int

	cmd    *exec.Cmd
	log    *logBuffer
	client *supervisorapi.Client
	before []container // the pods' containers once started
	watch  *realWatch
}

// container is one of the real device's containers as the bench checks
// it across the update: its API identity and its process.
type container struct {
	pod, name, id string
	started       time.Time
	restarts      int32
	pid           int
	pidStart      string // the process's start time (/proc/PID/stat field 22)
}

func newRealMember(ph *podhubServe, podhub, dir, packaged string, pods int) *realMember {
	r := &realMember{id: "upd-real", podhub: podhub, ph: ph, dir: dir, packaged: packaged, pods: pods,
		data: filepath.Join(dir, "data"), socket: filepath.Join(dir, "podvisor.sock"),
		cgroup: fmt.Sprintf("podvisor-updatebench-%d", os.Getpid()), log: &logBuffer{}}
	r.client = supervisorapi.NewClient(r.socket)
	return r
}

func (r *realMember) ID() string   { return r.id }
func (r *realMember) Arch() string { return runtime.GOARCH }

// Running is the version the hub last heard from the device.
func (r *realMember) Running() string {
	var d fleetdb.Device
	if err := r.ph.client.Do("GET", "/v1/devices/"+r.id, nil, &d); err != nil {
		return "unknown: " + err.Error()
	}
	return d.Version
}

// Received is the artifact bytes the device downloaded: its download
// files' sizes, as the watch saw them last (a file is removed once
// staged).
func (r *realMember) Received() int64 {
	if r.watch == nil {
		return 0
	}
	return r.watch.received()
}

// Start enrols the device, writes its pods and config, and runs the
// daemon until every pod's containers run; on failure it leaves nothing
// running.
func (r *realMember) Start() (err error) {
	defer func() {
		if err != nil {
			r.Stop()
		}
	}()
	bundle := filepath.Join(r.dir, "bundle")
	out, err := exec.Command(r.podhub, "--data-dir", r.ph.data, "device", "add", r.id, "--out", bundle,
		"--install-dir", bundle, "--url", "mqtts://"+r.ph.addr).CombinedOutput()
	if err != nil {
		return fmt.Errorf("podhub device add %s: %v %s", r.id, err, out)
	}
	if err := r.ph.client.Do("PUT", "/v1/devices/"+r.id+"/labels", map[string]string{"bench": "update"}, nil); err != nil {
		return err
	}
	hubConf, err := os.ReadFile(filepath.Join(bundle, "podvisor.yaml"))
	if err != nil {
		return err
	}
	config := filepath.Join(r.dir, "config.yaml")
	if err := os.WriteFile(config, append(hubConf, []byte("cgroups: {root: "+r.cgroup+"}\n")...), 0o644); err != nil {
		return err
	}
	manifests := filepath.Join(r.dir, "manifests")
	files := filepath.Join(r.dir, "files")
	for _, d := range []string{manifests, files} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for i := range r.pods {
		name := fmt.Sprintf("sleep-%02d", i)
		script := fmt.Sprintf("echo $$$$ > %s/%s.pid; exec sleep 100000", files, name)
		if err := os.WriteFile(filepath.Join(manifests, name+".yaml"), []byte(processPodYAML(name, script)), 0o644); err != nil {
			return err
		}
	}
	hb := fmt.Sprintf("echo $$$$ > %[1]s/heartbeat.pid; while :; do date +%%s%%N >> %[1]s/heartbeat; sleep %.1f; done", files, heartbeatPeriod.Seconds())
	if err := os.WriteFile(filepath.Join(manifests, "heartbeat.yaml"), []byte(processPodYAML("heartbeat", hb)), 0o644); err != nil {
		return err
	}
	r.cmd = exec.Command(r.packaged, "run", "--manifests", manifests, "--data-dir", r.data, "--socket", r.socket,
		"--config", config, "--stop-pods-on-exit")
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	r.cmd.Env = os.Environ()
	if err := r.cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		cs, err := r.containers(files)
		if err == nil && len(cs) == r.pods+1 {
			r.before = cs
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the real device's %d pods not all running in 2 min (%d: %v); its log ends:\n%s", r.pods+1, len(cs), err, lastLines(r.log.String(), 30))
		}
	}
	r.watch = startRealWatch(r, files)
	return nil
}

// processPodYAML is a process pod running one shell script (in which
// $$ is a $, as Kubernetes expands a command).
func processPodYAML(name, script string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sh", "-c", %q]
`, name, script)
}

// containers are the device's running containers, from its API and the
// PID each wrote to files.
func (r *realMember) containers(files string) ([]container, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	list, err := r.client.Pods(ctx)
	if err != nil {
		return nil, err
	}
	var out []container
	for _, p := range list.Items {
		for _, cs := range p.Status.ContainerStatuses {
			if cs.State.Running == nil || cs.ContainerID == "" {
				return nil, fmt.Errorf("pod %s: container %s not running", p.Name, cs.Name)
			}
			c := container{pod: p.Name, name: cs.Name, id: cs.ContainerID, started: cs.State.Running.StartedAt.Time, restarts: cs.RestartCount}
			data, err := os.ReadFile(filepath.Join(files, p.Name+".pid"))
			if err != nil || len(bytes.TrimSpace(data)) == 0 {
				return nil, fmt.Errorf("pod %s: no PID written yet", p.Name)
			}
			fmt.Sscan(string(data), &c.pid)
			if c.pidStart = procStart(c.pid); c.pidStart == "" {
				return nil, fmt.Errorf("pod %s: its process %d is gone", p.Name, c.pid)
			}
			out = append(out, c)
		}
	}
	return out, nil
}

// procStart is a process's start time in clock ticks since boot ("":
// gone), so a PID reused by another process does not pass for it.
func procStart(pid int) string {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 || f[0] == "Z" {
		return ""
	}
	return f[19]
}

// Stop ends the watch, stops the daemon (its pods with it), kills what
// it may have left and removes its cgroups.
func (r *realMember) Stop() {
	if r.watch != nil {
		r.watch.stop()
	}
	if r.cmd != nil && r.cmd.Process != nil {
		r.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { r.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			r.cmd.Process.Kill()
			<-done
		}
	}
	// Shims and keepers left behind (a daemon killed): they name the
	// device's data directory, unique to this run.
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(data), "podvisor-shim") && strings.Contains(string(data), r.data) {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	removeCgroups(r.cgroup)
}

// removeCgroups removes the cgroup tree root in every hierarchy, deepest
// first, for up to 10 s while killed processes exit.
func removeCgroups(root string) {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", root))
	dirs = append(dirs, filepath.Join("/sys/fs/cgroup", root))
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		left := 0
		for _, dir := range dirs {
			var tree []string
			filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
				if err == nil && d.IsDir() {
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
					left++
				}
			}
		}
		if left == 0 {
			return
		}
	}
}
