package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/syncbuf"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/firmware"
	"github.com/podvisor/podvisor/firmware/agent"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/prereq"
)

// envTestMain makes this test binary podvisor itself; its version is then
// read from the file <binary>.version beside it, so that copies of one
// binary stand for different releases.
const envTestMain = "PODVISOR_TEST_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(envTestMain) == "1" {
		if exe, err := os.Executable(); err == nil {
			if v, err := os.ReadFile(exe + ".version"); err == nil {
				version = strings.TrimSpace(string(v))
			}
			// A release that cannot run here: extra arguments.
			if extra, err := os.ReadFile(exe + ".args"); err == nil {
				os.Args = append(os.Args, strings.Fields(string(extra))...)
			}
		}
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// syncBuffer is a log the code under test writes while the test reads it.
type syncBuffer = syncbuf.Buffer

// device is a data directory with a packaged podvisor (this test binary)
// and slots made of copies of it.
type device struct {
	t       *testing.T
	dir     string
	factory string
	bin     []byte
	cgroup  string
}

func newDevice(t *testing.T) *device {
	prereq.Root(t, "the daemon sets up its cgroups")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	d := &device{t: t, dir: t.TempDir(), bin: bin, cgroup: fmt.Sprintf("podvisor-selfupdate-%d", os.Getpid())}
	d.factory = filepath.Join(d.dir, "usr", "podvisor")
	d.write(d.factory, bin, "v1.2.0")
	os.MkdirAll(filepath.Join(d.dir, "manifests"), 0o755)
	t.Cleanup(func() {
		roots, _ := filepath.Glob("/sys/fs/cgroup/*/" + d.cgroup) // every v1 hierarchy, and v2's unified
		for _, root := range append(roots, "/sys/fs/cgroup/"+d.cgroup) {
			removeCgroups(t, root)
		}
	})
	return d
}

func (d *device) write(path string, data []byte, version string) {
	d.t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o755); err != nil {
		d.t.Fatal(err)
	}
	if err := os.WriteFile(path+".version", []byte(version), 0o644); err != nil {
		d.t.Fatal(err)
	}
}

func hexSum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// slot installs bin as version's slot in state, and returns its name.
func (d *device) slot(version string, bin []byte, state string) string {
	d.t.Helper()
	name := agent.SlotName(version, hexSum(bin))
	dir := filepath.Join(d.dir, "data", "agent", "slots", name)
	d.write(filepath.Join(dir, "podvisor"), bin, version)
	rec := agent.Record{Version: version, Order: 5, State: state, TriesLeft: agent.Tries,
		Files: []agent.File{{Name: "podvisor", Size: int64(len(bin)), SHA256: hexSum(bin)}}}
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(dir, "slot.json"), data, 0o600); err != nil {
		d.t.Fatal(err)
	}
	return name
}

func (d *device) link(link, name string) {
	d.t.Helper()
	path := filepath.Join(d.dir, "data", "agent", link)
	os.Remove(path)
	if err := os.Symlink(filepath.Join("slots", name), path); err != nil {
		d.t.Fatal(err)
	}
}

func (d *device) record(name string) agent.Record {
	d.t.Helper()
	var r agent.Record
	data, err := os.ReadFile(filepath.Join(d.dir, "data", "agent", "slots", name, "slot.json"))
	if err != nil {
		d.t.Fatal(err)
	}
	json.Unmarshal(data, &r)
	return r
}

func (d *device) socket() string { return filepath.Join(d.dir, "pv.sock") }

// start runs the packaged podvisor as systemd would start it.
func (d *device) start() (*exec.Cmd, *syncBuffer) {
	d.t.Helper()
	conf := filepath.Join(d.dir, "config.yaml")
	os.WriteFile(conf, []byte("cgroups: {root: "+d.cgroup+"}\nprocess: {keeper: false}\nupdate: {commitTimeout: 30s}\n"), 0o644)
	cmd := exec.Command(d.factory, "run", "--config", conf, "--manifests", filepath.Join(d.dir, "manifests"),
		"--data-dir", filepath.Join(d.dir, "data"), "--socket", d.socket())
	cmd.Env = append(slices.DeleteFunc(os.Environ(), func(e string) bool {
		return strings.HasPrefix(e, agent.EnvLauncher+"=") || strings.HasPrefix(e, "NOTIFY_SOCKET=")
	}), envTestMain+"=1")
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		d.t.Fatal(err)
	}
	d.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd, log
}

// awaitLog waits for the daemon's log to contain want.
func awaitLog(t *testing.T, log *syncBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(log.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("the log has no %q within 30s:\n%s", want, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// awaitVersion waits for the daemon's API to answer with version.
func awaitVersion(t *testing.T, sock, want string, log *syncBuffer) {
	t.Helper()
	c := api.NewClient(sock)
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := c.Version(ctx)
		cancel()
		if err == nil && v.Version == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the API answers %+v, %v; want version %s within 30s\n%s", v, err, want, log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func exeOf(t *testing.T, pid int) string {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func stop(t *testing.T, cmd *exec.Cmd) {
	t.Helper()
	cmd.Process.Signal(syscall.SIGTERM)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("podvisor run: %v", err)
	}
}

// The packaged podvisor starts the current trial slot in its own process
// (same PID), which commits once ready. A trial whose commit gate fails
// (a container of the handoff is not there) rolls back, restarting into
// the previous version in the same process again, which reports why.
func TestLaunchCommitAndRollBackInOneProcess(t *testing.T) {
	d := newDevice(t)
	v13 := d.slot("v1.3.0", d.bin, agent.StateTrial)
	d.link("current", v13)
	cmd, log := d.start()
	awaitVersion(t, d.socket(), "v1.3.0", log)
	awaitLog(t, log, "update Committed")
	if exe, want := exeOf(t, cmd.Process.Pid), filepath.Join(d.dir, "data", "agent", "slots", v13, "podvisor"); exe != want {
		t.Fatalf("PID %d runs %s, want %s", cmd.Process.Pid, exe, want)
	}
	if r := d.record(v13); r.State != agent.StateCommitted {
		t.Fatalf("slot %s is %s after the gate, want committed", v13, r.State)
	}
	stop(t, cmd)

	// v1.4.0 on trial, with a handoff naming a container nothing runs.
	bin14 := append(append([]byte(nil), d.bin...), "v1.4.0"...) // other bytes, same program
	v14 := d.slot("v1.4.0", bin14, agent.StateTrial)
	d.link("previous", v13)
	d.link("current", v14)
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	handoff, _ := json.Marshal(agent.Handoff{BootID: strings.TrimSpace(string(boot)),
		Containers: []agent.Container{{PodUID: "u1", Pod: "default/web", Name: "app", ID: "podvisor://gone"}}})
	os.WriteFile(filepath.Join(d.dir, "data", "agent", "handoff.json"), handoff, 0o600)
	cmd, log = d.start()
	awaitLog(t, log, "update RolledBack")
	awaitVersion(t, d.socket(), "v1.3.0", log)
	if exe, want := exeOf(t, cmd.Process.Pid), filepath.Join(d.dir, "data", "agent", "slots", v13, "podvisor"); exe != want {
		t.Fatalf("PID %d runs %s after the rollback, want %s", cmd.Process.Pid, exe, want)
	}
	if !strings.Contains(log.String(), "v1.4.0: container app of pod default/web was not adopted") {
		t.Fatalf("the rollback's reason is not reported:\n%s", log.String())
	}
	stop(t, cmd)
}

// A new version that dies at every start is started twice, then the
// launcher rolls back to the previous one, which reports the reason with
// the last error the new one recorded.
func TestCrashLoopRollsBack(t *testing.T) {
	d := newDevice(t)
	v13 := d.slot("v1.3.0", d.bin, agent.StateCommitted)
	// v1.4.0 fails at start: its config is refused... by a binary that
	// only knows an older schema. A script stands for it.
	script := []byte("#!/bin/sh\necho 'error: v1.4.0 cannot start' >&2\nexit 1\n")
	v14 := d.slot("v1.4.0", script, agent.StateTrial)
	d.link("previous", v13)
	d.link("current", v14)
	for i := 0; i < agent.Tries; i++ {
		cmd, log := d.start()
		if err := cmd.Wait(); err == nil || !strings.Contains(log.String(), "v1.4.0 cannot start") {
			t.Fatalf("start %d: %v\n%s", i+1, err, log.String())
		}
	}
	cmd, log := d.start()
	awaitVersion(t, d.socket(), "v1.3.0", log)
	awaitLog(t, log, "update RolledBack")
	if !strings.Contains(log.String(), "v1.4.0 started 2 times without becoming ready") {
		t.Fatalf("the rollback's reason is not reported:\n%s", log.String())
	}
	stop(t, cmd)
}

// A new version that fails at every start records its error; after its
// two starts the launcher rolls back, and the reason carries that error.
func TestFailingVersionRecordsItsError(t *testing.T) {
	d := newDevice(t)
	v13 := d.slot("v1.3.0", d.bin, agent.StateCommitted)
	bin14 := append(append([]byte(nil), d.bin...), "v1.4.0"...)
	v14 := d.slot("v1.4.0", bin14, agent.StateTrial)
	slot14 := filepath.Join(d.dir, "data", "agent", "slots", v14, "podvisor")
	os.WriteFile(slot14+".args", []byte("--socket /proc/self/podvisor.sock\n"), 0o644)
	d.link("previous", v13)
	d.link("current", v14)
	for i := 0; i < agent.Tries; i++ {
		cmd, log := d.start()
		if err := cmd.Wait(); err == nil {
			t.Fatalf("start %d of v1.4.0 succeeded:\n%s", i+1, log.String())
		}
	}
	if r := d.record(v14); !strings.Contains(r.LastError, "API socket") {
		t.Fatalf("v1.4.0 recorded %q; want its start-up error", r.LastError)
	}
	cmd, log := d.start()
	awaitVersion(t, d.socket(), "v1.3.0", log)
	awaitLog(t, log, "update RolledBack")
	if !strings.Contains(log.String(), "v1.4.0 started 2 times without becoming ready: API socket") {
		t.Fatalf("the rollback's reason lacks v1.4.0's error:\n%s", log.String())
	}
	stop(t, cmd)
}

// removeCgroups removes a cgroup tree the test's daemons made, deepest
// first, killing what still runs in it (the test's pod and its shim).
func removeCgroups(t *testing.T, root string) {
	var dirs []string
	filepath.WalkDir(root, func(path string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			dirs = append(dirs, path)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		deadline := time.Now().Add(10 * time.Second)
		for {
			procs, _ := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs"))
			for _, f := range strings.Fields(string(procs)) {
				var pid int
				fmt.Sscan(f, &pid)
				syscall.Kill(pid, syscall.SIGKILL)
			}
			err := os.Remove(dirs[i])
			if err == nil || os.IsNotExist(err) {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("cgroup left behind (its processes did not end within 10s): %v", err)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// A trial version adopts the pods the previous daemon left running, the
// same processes, and commits: its gate found every container of the
// handoff unrestarted. The next trial fails its gate and restarts into
// the committed version in its own process, the pod running on.
func TestTrialAdoptsRunningPodAndCommits(t *testing.T) {
	d := newDevice(t)
	pidFile := filepath.Join(d.dir, "web.pid")
	pod := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: web}
spec:
  runtimeClassName: process
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "echo $$$$ > %s; exec sleep 3600"]
`, pidFile)
	os.WriteFile(filepath.Join(d.dir, "manifests", "web.yaml"), []byte(pod), 0o644)
	cmd, log := d.start()
	awaitVersion(t, d.socket(), "v1.2.0", log)
	c := api.NewClient(d.socket())
	var running []agent.Container
	deadline := time.Now().Add(30 * time.Second)
	for len(running) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pod web did not run within 30s:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
		if list, err := c.Pods(context.Background()); err == nil {
			var pods []*v1.Pod
			for i := range list.Items {
				pods = append(pods, &list.Items[i])
			}
			running = containersOf(pods)
		}
	}
	var pid []byte
	for len(pid) == 0 || pid[len(pid)-1] != '\n' {
		if time.Now().After(deadline) {
			t.Fatalf("pod web wrote no pid within 30s:\n%s", log.String())
		}
		time.Sleep(20 * time.Millisecond)
		pid, _ = os.ReadFile(pidFile)
	}
	stop(t, cmd) // the pods run on

	// The switch, as the installer makes it.
	v13 := d.slot("v1.3.0", d.bin, agent.StateTrial)
	d.link("current", v13)
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	handoff, _ := json.Marshal(agent.Handoff{BootID: strings.TrimSpace(string(boot)), Containers: running})
	os.WriteFile(filepath.Join(d.dir, "data", "agent", "handoff.json"), handoff, 0o600)
	cmd, log = d.start()
	awaitVersion(t, d.socket(), "v1.3.0", log)
	awaitLog(t, log, "update Committed")
	if r := d.record(v13); r.State != agent.StateCommitted {
		t.Fatalf("slot %s is %s, want committed", v13, r.State)
	}
	if now, _ := os.ReadFile(pidFile); string(now) != string(pid) {
		t.Fatalf("the pod's process changed from %s to %s", pid, now)
	}
	var p int
	fmt.Sscan(string(pid), &p)
	if syscall.Kill(p, 0) != nil {
		t.Fatalf("the pod's process %d is gone", p)
	}

	// v1.4.0 fails its gate (a container of the handoff is missing): the
	// daemon restarts into v1.3.0 in its own process, the pod untouched.
	bin14 := append(append([]byte(nil), d.bin...), "v1.4.0"...)
	v14 := d.slot("v1.4.0", bin14, agent.StateTrial)
	d.link("previous", v13)
	d.link("current", v14)
	missing := append(running, agent.Container{PodUID: "u1", Pod: "default/gone", Name: "app", ID: "process://gone"})
	handoff, _ = json.Marshal(agent.Handoff{BootID: strings.TrimSpace(string(boot)), Containers: missing})
	os.WriteFile(filepath.Join(d.dir, "data", "agent", "handoff.json"), handoff, 0o600)
	stop(t, cmd)
	cmd, log = d.start()
	awaitLog(t, log, "update RolledBack")
	awaitVersion(t, d.socket(), "v1.3.0", log)
	if now, _ := os.ReadFile(pidFile); string(now) != string(pid) || syscall.Kill(p, 0) != nil {
		t.Fatalf("the pod's process %s did not run on through the restart (now %s)", pid, now)
	}
	stop(t, cmd)
}

// The release key is update.releaseKey, else the hub's; a bad one is an
// error naming the setting.
func TestReleaseKey(t *testing.T) {
	dir := t.TempDir()
	conf := config.Default()
	if k, err := releaseKey(conf); k != nil || err != nil {
		t.Fatalf("without keys: %v, %v; want none", k, err)
	}
	conf.Hub.Key = filepath.Join(dir, "hub.pub")
	if _, err := releaseKey(conf); err == nil || !strings.Contains(err.Error(), "hub.key") {
		t.Fatalf("a missing hub key: %v; want an error naming hub.key", err)
	}
	conf.Update.ReleaseKey = filepath.Join(dir, "release.pub")
	os.WriteFile(conf.Update.ReleaseKey, []byte("not a key\n"), 0o644)
	if _, err := releaseKey(conf); err == nil || !strings.Contains(err.Error(), "update.releaseKey: "+conf.Update.ReleaseKey) {
		t.Fatalf("a bad release key: %v; want an error naming update.releaseKey and the file", err)
	}
}

// fakeOS is an update tool whose boot state the test sets.
type fakeOS struct {
	state     firmware.BootState
	good, bad int
}

func (f *fakeOS) Name() string { return "fake" }
func (f *fakeOS) Install(context.Context, string, func(firmware.Progress)) error {
	return nil
}
func (f *fakeOS) Booted(context.Context) (firmware.BootState, error) { return f.state, nil }
func (f *fakeOS) MarkGood(context.Context) error                     { f.good++; return nil }
func (f *fakeOS) MarkBad(context.Context) error                      { f.bad++; return nil }

// reports records what the updater reports.
type reports struct {
	mu  sync.Mutex
	all []protocol.UpdateState
}

func (r *reports) Download(context.Context, int64, protocol.Artifact, string, func(int64)) error {
	return errors.New("no downloads here")
}
func (r *reports) Report(s protocol.UpdateState) {
	r.mu.Lock()
	r.all = append(r.all, s)
	r.mu.Unlock()
}

// After the reboot into a bundle, the daemon's readiness commits it
// (mark-good) and the order that rebooted the device is reported
// Committed; a daemon not ready by the deadline marks it bad and reports
// the rollback.
func TestFirmwareHealthGate(t *testing.T) {
	for _, ready := range []bool{true, false} {
		t.Run(fmt.Sprint("ready=", ready), func(t *testing.T) {
			dir := t.TempDir()
			// The order that installed the bundle and rebooted the device.
			os.MkdirAll(filepath.Join(dir, "agent"), 0o700)
			last, _ := json.Marshal(protocol.UpdateState{Schema: protocol.Schema, Device: "dev1", Order: 4, Kind: protocol.ReleaseFirmware,
				Version: "2026.11.1", Phase: protocol.UpdateRestarting})
			os.WriteFile(filepath.Join(dir, "agent", "state.json"), last, 0o600)
			rep := &reports{}
			u := agent.New(agent.Options{DataDir: dir, Device: "dev1", Version: "v1.2.0", Transport: rep})
			drv := &fakeOS{state: firmware.BootState{Pending: true, Slot: "rootfs.1", Version: "2026.11.1"}}
			readyCh := make(chan struct{})
			if ready {
				close(readyCh)
			}
			// Only the case that is never ready waits out its deadline; a
			// ready one gets room for a busy machine's scheduling.
			deadline := 10 * time.Second
			if !ready {
				deadline = 50 * time.Millisecond
			}
			confirmFirmware(t.Context(), drv, readyCh, deadline, u, slog.New(slog.DiscardHandler))
			rep.mu.Lock()
			defer rep.mu.Unlock()
			if len(rep.all) != 1 {
				t.Fatalf("reports %+v; want one", rep.all)
			}
			s := rep.all[0]
			if ready && (s.Phase != protocol.UpdateCommitted || s.Order != 4 || s.Running != "2026.11.1" || drv.good != 1 || drv.bad != 0) {
				t.Fatalf("report %+v, marked good %d bad %d; want Committed and mark-good", s, drv.good, drv.bad)
			}
			if !ready && (s.Phase != protocol.UpdateRolledBack || !strings.Contains(s.Reason, "not healthy within") || drv.bad != 1 || drv.good != 0) {
				t.Fatalf("report %+v, marked good %d bad %d; want RolledBack and mark-bad", s, drv.good, drv.bad)
			}
		})
	}
}
