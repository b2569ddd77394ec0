package process

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/crilog"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// The test binary doubles as the shim, as podvisor does.
func TestMain(m *testing.M) {
	if len(os.Args) == 4 && os.Args[1] == "shim" && os.Args[2] == shim.KeeperFlag {
		os.Exit(shim.RunKeeper(os.Args[3]))
	}
	if len(os.Args) == 3 && os.Args[1] == "shim" {
		os.Exit(shim.Run(os.Args[2]))
	}
	os.Exit(m.Run())
}

type env struct {
	t    *testing.T
	root string
	rt   *Runtime
	n    int
}

func newEnv(t *testing.T) *env {
	root := t.TempDir()
	rt, err := New(filepath.Join(root, "containers"), []string{os.Args[0], "shim"}, runtime.Cgroups{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, root: root, rt: rt}
}

func (e *env) spec(argv ...string) shim.Spec {
	e.n++
	id := fmt.Sprintf("pod_c_%d", e.n)
	return shim.Spec{InstanceID: id, PodUID: "pod", Container: "c", Attempt: e.n, Argv: argv,
		Env: []string{"PATH=" + shim.DefaultPath}, LogPath: filepath.Join(e.root, "logs", id+".log"),
		LogMaxBytes: 1 << 20, LogMaxFiles: 3}
}

func (e *env) start(s shim.Spec) {
	e.t.Helper()
	if _, err := e.rt.StartPlaced(s, nil); err != nil {
		e.t.Fatalf("start %v: %v", s.Argv, err)
	}
}

func (e *env) exit(id string) runtime.Exit {
	e.t.Helper()
	select {
	case x := <-e.rt.Exits():
		if x.InstanceID != id {
			e.t.Fatalf("exit of %s, want %s", x.InstanceID, id)
		}
		return x
	case <-time.After(10 * time.Second):
		e.t.Fatalf("no exit of %s within 10s", id)
		return runtime.Exit{}
	}
}

func logText(t *testing.T, path string) string {
	var b bytes.Buffer
	if err := crilog.Copy(&b, path); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestExitCodeAndLogs(t *testing.T) {
	e := newEnv(t)
	s := e.spec("sh", "-c", "echo out; echo err >&2; exit 3")
	e.start(s)
	st := e.exit(s.InstanceID)
	if st.ExitCode != 3 || st.Reason != "" {
		t.Fatalf("status = %+v", st)
	}
	got := logText(t, s.LogPath)
	if !strings.Contains(got, "out\n") || !strings.Contains(got, "err\n") {
		t.Fatalf("log = %q", got)
	}
	raw, _ := os.ReadFile(s.LogPath)
	if !bytes.Contains(raw, []byte(" stdout F out\n")) || !bytes.Contains(raw, []byte(" stderr F err\n")) {
		t.Fatalf("not CRI format: %q", raw)
	}
}

func TestStartErrorForMissingCommand(t *testing.T) {
	e := newEnv(t)
	s := e.spec("no-such-command-podvisor")
	_, err := e.rt.StartPlaced(s, nil)
	if err == nil || !strings.Contains(err.Error(), "executable file not found") {
		t.Fatalf("err = %v", err)
	}
	var st shim.ExitStatus
	shim.ReadJSON(filepath.Join(e.rt.instanceDir(s.InstanceID), shim.ExitFile), &st)
	if st.Reason != "StartError" || st.ExitCode != 128 {
		t.Fatalf("recorded %+v", st)
	}
}

// restarted is a second runtime over e's directory, standing for a
// restarted daemon (with the keeper enabled if keeper), and what its
// Recover found, by instance.
func (e *env) restarted(keeper bool) (*Runtime, map[string]runtime.Found) {
	e.t.Helper()
	rt2, err := New(e.rt.dir, []string{os.Args[0], "shim"}, runtime.Cgroups{}, slog.Default())
	if err != nil {
		e.t.Fatal(err)
	}
	if keeper {
		if err := rt2.EnableKeeper(); err != nil {
			e.t.Fatal(err)
		}
	}
	recs, err := rt2.Recover()
	if err != nil {
		e.t.Fatal(err)
	}
	byID := map[string]runtime.Found{}
	for _, r := range recs {
		byID[r.InstanceID] = r
	}
	return rt2, byID
}

// waitPids waits for the container's processes to write n pids, one a
// line, to pidfile and returns them.
func waitPids(t *testing.T, pidfile string, n int) []int {
	t.Helper()
	var pids []int
	waitFor(t, fmt.Sprintf("%d processes to record their pids in %s", n, pidfile), func() bool {
		data, _ := os.ReadFile(pidfile)
		pids = nil
		for _, f := range strings.Fields(string(data)) {
			p, _ := strconv.Atoi(f)
			pids = append(pids, p)
		}
		return len(pids) == n
	})
	return pids
}

func TestKillTakesTheWholeTree(t *testing.T) {
	e := newEnv(t)
	pidfile := filepath.Join(e.root, "pids")
	// A child in the group, and one that escapes into its own session.
	s := e.spec("sh", "-c", "sleep 1000 & echo $! >> "+pidfile+"; setsid sleep 1001 & echo $! >> "+pidfile+"; wait")
	e.start(s)
	pids := waitPids(t, pidfile, 2)
	if err := e.rt.Kill(s.InstanceID); err != nil {
		t.Fatal(err)
	}
	st := e.exit(s.InstanceID)
	if st.ExitCode != 137 || st.Signal != 9 {
		t.Fatalf("status = %+v", st)
	}
	for _, p := range pids {
		if unix.Kill(p, 0) == nil {
			t.Errorf("descendant %d survived the kill", p)
		}
	}
}

func TestLeaderExitKillsLeftovers(t *testing.T) {
	e := newEnv(t)
	pidfile := filepath.Join(e.root, "pid")
	s := e.spec("sh", "-c", "setsid sleep 1000 & echo $! > "+pidfile+"; sleep 0.2; exit 0")
	e.start(s)
	if st := e.exit(s.InstanceID); st.ExitCode != 0 {
		t.Fatalf("status = %+v", st)
	}
	data, _ := os.ReadFile(pidfile)
	p, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	if p == 0 || unix.Kill(p, 0) == nil {
		t.Fatalf("background process %d outlived its container", p)
	}
}

func TestSignalIsForwardedToLeader(t *testing.T) {
	e := newEnv(t)
	s := e.spec("sh", "-c", "trap 'echo got-term; exit 42' TERM; echo ready; while true; do sleep 0.05; done")
	e.start(s)
	waitFor(t, "the workload to log ready", func() bool { return strings.Contains(logText(t, s.LogPath), "ready") })
	if err := e.rt.Signal(s.InstanceID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := e.exit(s.InstanceID); st.ExitCode != 42 {
		t.Fatalf("status = %+v", st)
	}
	if !strings.Contains(logText(t, s.LogPath), "got-term") {
		t.Fatal("trap did not run")
	}
}

func TestAdoptionByANewRuntime(t *testing.T) {
	e := newEnv(t)
	running := e.spec("sleep", "1000")
	done := e.spec("sh", "-c", "exit 7")
	e.start(running)
	e.start(done)
	e.exit(done.InstanceID)

	// A second runtime over the same directory stands for a restarted
	// daemon: the running instance is adopted, the finished one reports
	// its real exit code.
	rt2, byID := e.restarted(false)
	if r := byID[running.InstanceID]; !r.Alive || r.StartedAt.IsZero() {
		t.Fatalf("running instance not adopted: %+v", r)
	}
	if r := byID[done.InstanceID]; r.Alive || r.Exit == nil || r.Exit.ExitCode != 7 {
		t.Fatalf("finished instance: %+v", r)
	}
	if err := rt2.Kill(running.InstanceID); err != nil {
		t.Fatal(err)
	}
	select {
	case x := <-rt2.Exits():
		if x.InstanceID != running.InstanceID || x.ExitCode != 137 {
			t.Fatalf("exit = %+v", x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("adopted instance's exit never arrived")
	}
}

func TestLogRotationKeepsEveryLine(t *testing.T) {
	e := newEnv(t)
	s := e.spec("sh", "-c", "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done")
	s.LogMaxBytes, s.LogMaxFiles = 8<<10, 40
	e.start(s)
	e.exit(s.InstanceID)
	files := crilog.Files(s.LogPath)
	if len(files) < 5 {
		t.Fatalf("expected several rotated files, got %v", files)
	}
	lines := strings.Split(strings.TrimSpace(logText(t, s.LogPath)), "\n")
	if len(lines) != 2000 || lines[0] != "line-0" || lines[1999] != "line-1999" {
		t.Fatalf("%d lines, first %q last %q", len(lines), lines[0], lines[len(lines)-1])
	}
}

func TestFollowLogSeesNewLinesAndEnds(t *testing.T) {
	e := newEnv(t)
	s := e.spec("sh", "-c", "echo one; sleep 0.3; echo two")
	e.start(s)
	done := make(chan struct{})
	var out bytes.Buffer
	finished := make(chan error)
	go func() { finished <- e.rt.FollowLog(context.Background(), &out, s.LogPath, done) }()
	e.exit(s.InstanceID)
	close(done)
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("follow did not end after the container did")
	}
	if out.String() != "one\ntwo\n" {
		t.Fatalf("followed %q", out.String())
	}
}

func TestBuildSpecEnv(t *testing.T) {
	pod := testPod()
	s, err := BuildSpec(pod, &pod.Spec.Containers[0], runtime.PodEnv{NodeName: "dev1", HostIP: "10.0.0.2"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"PATH=" + shim.DefaultPath, "HOSTNAME=web", "POD=web", "NS=prod", "UID=u-1", "NODE=dev1",
		"GREETING=hello web", "TIER=front"}
	if strings.Join(s.Env, "|") != strings.Join(want, "|") {
		t.Fatalf("env =\n%v\nwant\n%v", s.Env, want)
	}
	if strings.Join(s.Argv, " ") != "echo hello web $(NOPE) $(POD)" {
		t.Fatalf("argv = %q", s.Argv)
	}
	if s.UID == nil || *s.UID != 1000 || s.GID == nil || *s.GID != 1000 {
		t.Fatalf("uid/gid = %v/%v", s.UID, s.GID)
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

// A placed start runs the container only after place has returned, and
// hands place the shim's pid (a systemd scope is made from it).
func TestPlacedStartWaitsForPlacement(t *testing.T) {
	e := newEnv(t)
	marker := filepath.Join(e.root, "placed")
	s := e.spec("sh", "-c", "test -f "+marker+" && echo placed-first")
	s.Cgroup.Await = true
	var gotPid int
	_, err := e.rt.StartPlaced(s, func(pid int) error {
		gotPid = pid
		time.Sleep(50 * time.Millisecond) // the container must not run meanwhile
		return os.WriteFile(marker, nil, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	if st := e.exit(s.InstanceID); st.ExitCode != 0 {
		t.Fatalf("container ran before it was placed: %+v, log %q", st, logText(t, s.LogPath))
	}
	var state shim.State
	shim.ReadJSON(filepath.Join(e.rt.instanceDir(s.InstanceID), shim.StateFile), &state)
	if gotPid == 0 || gotPid != state.ShimPid {
		t.Fatalf("place got pid %d, shim was %d", gotPid, state.ShimPid)
	}

	// A failed placement is a start error, and the shim is gone.
	s = e.spec("sh", "-c", "echo must-not-run")
	s.Cgroup.Await = true
	_, err = e.rt.StartPlaced(s, func(pid int) error {
		gotPid = pid
		return errors.New("no scope for you")
	})
	if err == nil || !strings.Contains(err.Error(), "no scope for you") {
		t.Fatalf("err = %v", err)
	}
	if unix.Kill(gotPid, 0) == nil {
		t.Fatalf("shim %d still runs after a failed placement", gotPid)
	}
	if strings.Contains(logText(t, s.LogPath), "must-not-run") {
		t.Fatal("the container ran though it was never placed")
	}
}

// With spec.cgroup.oomEvents the shim judges OOMKilled itself when its
// leader dies of SIGKILL (a systemd scope is gone before the daemon could
// read it). The file stands in for the cgroup's; the VM test
// (test/vm/systemd.sh) checks a real OOM kill in a real scope.
func TestShimReadsOOMKillsWhenTheLeaderDies(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		events, script, want string
	}{
		{"oom 1\noom_kill 1\n", "kill -9 $$", "OOMKilled"},
		{"oom 0\noom_kill 0\n", "kill -9 $$", ""},
		{"oom_kill 1\n", "exit 1", ""}, // not killed: not the OOM killer's doing
	} {
		events := filepath.Join(e.root, "memory.events")
		os.WriteFile(events, []byte(c.events), 0o600)
		s := e.spec("sh", "-c", c.script)
		s.Cgroup.OOMEvents = events
		e.start(s)
		if st := e.exit(s.InstanceID); st.Reason != c.want {
			t.Errorf("%q with %q: reason %q, want %q", c.script, c.events, st.Reason, c.want)
		}
	}
}

// The log reader must take whole every record the shim writes.
func TestLogReaderTakesTheShimsLongestLine(t *testing.T) {
	if crilog.MaxLine != shim.MaxLine {
		t.Fatalf("crilog.MaxLine = %d, shim.MaxLine = %d", crilog.MaxLine, shim.MaxLine)
	}
}

var _ runtime.LogReader = (*Runtime)(nil)

// A shim's parent is told from its /proc entry: an adopted shim this
// process started before it executed a new version is its to reap.
func TestOwnChild(t *testing.T) {
	cmd := exec.Command("sleep", "1000")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if !ownChild(cmd.Process.Pid) {
		t.Errorf("sleep %d is not seen as a child", cmd.Process.Pid)
	}
	if ownChild(1) || ownChild(os.Getpid()) {
		t.Error("init or this process seen as a child")
	}
}

// A container whose environment names a missing object is never created:
// it waits with the kubelet's reason and message.
func TestStartMissingObjectIsConfigError(t *testing.T) {
	rt, err := New(filepath.Join(t.TempDir(), "containers"), []string{"true"}, runtime.Cgroups{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod()
	pod.Spec.Containers[0].EnvFrom = []v1.EnvFromSource{{ConfigMapRef: &v1.ConfigMapEnvSource{LocalObjectReference: v1.LocalObjectReference{Name: "app"}}}}
	var got runtime.Started
	rt.Start(&runtime.Container{Pod: pod, Spec: &pod.Spec.Containers[0], InstanceID: "u-1_app_1"}, func(s runtime.Started) { got = s })
	var create *runtime.CreateError
	if !errors.As(got.Err, &create) || create.Reason != "CreateContainerConfigError" || create.Message != `configmap "app" not found` {
		t.Fatalf("start: %v", got.Err)
	}
}

// exec runs in the environment the instance started with, not in one
// made again from objects that may have changed since.
func TestExecTargetKeepsTheStartedEnv(t *testing.T) {
	rt, err := New(filepath.Join(t.TempDir(), "containers"), []string{"true"}, runtime.Cgroups{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	pod := testPod()
	id := "u-1_app_1"
	if err := os.MkdirAll(rt.instanceDir(id), 0o700); err != nil {
		t.Fatal(err)
	}
	started := shim.Spec{InstanceID: id, Env: []string{"PATH=/bin", "MODE=then"}, Dir: "/srv"}
	if err := shim.WriteJSONAtomic(filepath.Join(rt.instanceDir(id), shim.SpecFile), started); err != nil {
		t.Fatal(err)
	}
	tgt, err := rt.ExecTarget(pod, "app", id, runtime.PodEnv{})
	if err != nil || strings.Join(tgt.Env, " ") != "PATH=/bin MODE=then" || tgt.Dir != "/srv" {
		t.Fatalf("target %+v, %v", tgt, err)
	}
	// Without the instance's record, the environment is made again.
	tgt, err = rt.ExecTarget(pod, "app", "u-1_app_2", runtime.PodEnv{NodeName: "dev1"})
	if err != nil || !strings.Contains(strings.Join(tgt.Env, " "), "NODE=dev1") {
		t.Fatalf("target %+v, %v", tgt, err)
	}
}
