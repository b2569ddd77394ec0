package process

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// newKeeperEnv is an env whose runtime starts containers through a keeper
// built from shimCmd (nil: the test binary), each container in a cgroup of
// its own (the keeper runs only those).
func newKeeperEnv(t *testing.T, dir string, shimCmd []string) *env {
	if os.Geteuid() != 0 {
		missing(t, "root: the keeper's containers need cgroups of their own")
	}
	if shimCmd == nil {
		shimCmd = []string{os.Args[0], "shim"}
	}
	root := t.TempDir()
	if dir == "" {
		dir = filepath.Join(root, "containers")
	}
	rt, err := New(dir, shimCmd, runtime.Cgroups{}, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.EnableKeeper(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { killKeepers(rt) })
	return &env{t: t, root: root, rt: rt}
}

// killKeepers kills every keeper rt knows and waits until each is gone.
func killKeepers(rt *Runtime) {
	rt.mu.Lock()
	var kcs []*keeperConn
	for _, kc := range rt.keepers.watched {
		kcs = append(kcs, kc)
	}
	rt.mu.Unlock()
	for _, kc := range kcs {
		syscall.Kill(kc.pid, syscall.SIGKILL)
		for i := 0; i < 500 && syscall.Kill(kc.pid, 0) == nil && !zombie(kc.pid); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func zombie(pid int) bool {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] == 'Z'
}

// testCgroup makes a cgroup for one container (cgroup v2, else the v1
// pids hierarchy) and removes it at the end of the test.
func testCgroup(t *testing.T, name string) shim.Cgroup {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup", "podvisor-keeper-test-"+name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			missing(t, "a cgroup for the test: %v", err)
		}
		t.Cleanup(func() { rmdirWhenEmpty(dir) })
		return shim.Cgroup{Dir: dir}
	}
	self := ""
	data, _ := os.ReadFile("/proc/self/cgroup")
	for _, l := range strings.Split(string(data), "\n") {
		if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && parts[1] == "pids" {
			self = parts[2]
		}
	}
	base := "/sys/fs/cgroup/pids"
	dir := filepath.Join(base, "podvisor-keeper-test-"+name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		missing(t, "a cgroup for the test: %v", err)
	}
	t.Cleanup(func() { rmdirWhenEmpty(dir) })
	return shim.Cgroup{Procs: []string{filepath.Join(dir, "cgroup.procs")}, Return: []string{filepath.Join(base, self, "cgroup.procs")}}
}

func rmdirWhenEmpty(dir string) {
	for i := 0; i < 500; i++ {
		if err := os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// keptSpec is e.spec in a cgroup of its own.
func (e *env) keptSpec(argv ...string) shim.Spec {
	s := e.spec(argv...)
	s.Cgroup = testCgroup(e.t, fmt.Sprintf("%d-%s", os.Getpid(), strings.ReplaceAll(e.t.Name(), "/", "-")+"-"+strconv.Itoa(e.n)))
	return s
}

func state(t *testing.T, rt *Runtime, id string) shim.State {
	t.Helper()
	var ss shim.State
	if err := shim.ReadJSON(filepath.Join(rt.instanceDir(id), shim.StateFile), &ss); err != nil {
		t.Fatal(err)
	}
	return ss
}

func lockHeld(t *testing.T, rt *Runtime, id string) bool {
	t.Helper()
	f, err := os.Open(filepath.Join(rt.instanceDir(id), shim.LockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil
}

// One keeper runs every container: exit codes and logs as a shim records
// them, signals forwarded, the whole tree killed (also what left the
// process group), locks held exactly while the containers live.
func TestKeeperRunsEveryContainer(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	pidfile := filepath.Join(e.root, "pids")
	exits := e.keptSpec("sh", "-c", "echo out; echo err >&2; exit 3")
	trapped := e.keptSpec("sh", "-c", "trap 'exit 7' TERM; touch "+pidfile+".trap; while :; do sleep 0.05; done")
	tree := e.keptSpec("sh", "-c", "sleep 1000 & echo $! >> "+pidfile+"; setsid sleep 1001 & echo $! >> "+pidfile+"; wait")
	e.start(trapped)
	e.start(tree)
	e.start(exits)
	if st := e.exit(exits.InstanceID); st.ExitCode != 3 || st.Reason != "" {
		t.Fatalf("status = %+v", st)
	}
	if lockHeld(t, e.rt, exits.InstanceID) {
		t.Fatal("an ended instance's lock is still held")
	}
	if got := logText(t, exits.LogPath); got != "out\nerr\n" && got != "err\nout\n" {
		t.Fatalf("log = %q", got)
	}
	a, b := state(t, e.rt, trapped.InstanceID), state(t, e.rt, tree.InstanceID)
	if a.Keeper == "" || a.ShimPid != b.ShimPid || a.LeaderPid == b.LeaderPid {
		t.Fatalf("both containers must run under one keeper: %+v %+v", a, b)
	}
	if !lockHeld(t, e.rt, trapped.InstanceID) || !lockHeld(t, e.rt, tree.InstanceID) {
		t.Fatal("a running instance's lock is free")
	}
	cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", a.ShimPid))
	if strings.Contains(string(cg), "podvisor-keeper-test") {
		t.Fatalf("the keeper stayed in a container's cgroup after forking it:\n%s", cg)
	}

	waitFor(t, "the trap to be set", func() bool { _, err := os.Stat(pidfile + ".trap"); return err == nil })
	if err := e.rt.Signal(trapped.InstanceID, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if st := e.exit(trapped.InstanceID); st.ExitCode != 7 {
		t.Fatalf("SIGTERM not forwarded: %+v", st)
	}

	pids := waitPids(t, pidfile, 2)
	if err := e.rt.Kill(tree.InstanceID); err != nil {
		t.Fatal(err)
	}
	if st := e.exit(tree.InstanceID); st.ExitCode != 137 || st.Signal != 9 {
		t.Fatalf("status = %+v", st)
	}
	for _, p := range pids {
		if syscall.Kill(p, 0) == nil && !zombie(p) {
			t.Fatalf("process %d of the killed container outlived it", p)
		}
	}
	if syscall.Kill(a.ShimPid, 0) != nil {
		t.Fatal("the keeper must stay up when its containers end")
	}
}

// A keeper killed with -9 takes every container with it: all exits are
// reported ContainerStatusUnknown/137, every lock is free, and the next
// start brings up a new keeper.
func TestKeeperKilledTakesItsContainers(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	var specs []shim.Spec
	for i := 0; i < 5; i++ {
		s := e.keptSpec("sleep", "1000")
		e.start(s)
		specs = append(specs, s)
	}
	ss := state(t, e.rt, specs[0].InstanceID)
	syscall.Kill(ss.ShimPid, syscall.SIGKILL)
	got := map[string]runtime.Exit{}
	for range specs {
		select {
		case x := <-e.rt.Exits():
			got[x.InstanceID] = x
		case <-time.After(10 * time.Second):
			t.Fatalf("exits after the keeper died: %d of %d", len(got), len(specs))
		}
	}
	for _, s := range specs {
		x := got[s.InstanceID]
		if x.ExitCode != 137 || x.Reason != "ContainerStatusUnknown" {
			t.Fatalf("%s: %+v", s.InstanceID, x)
		}
		if lockHeld(t, e.rt, s.InstanceID) {
			t.Fatalf("%s: lock held after its keeper died", s.InstanceID)
		}
		leader := state(t, e.rt, s.InstanceID).LeaderPid
		waitFor(t, s.InstanceID+"'s leader to die with its keeper (parent-death signal)", func() bool {
			return syscall.Kill(leader, 0) != nil || zombie(leader)
		})
	}
	again := e.keptSpec("sh", "-c", "exit 4")
	e.start(again)
	if x := e.exit(again.InstanceID); x.ExitCode != 4 {
		t.Fatalf("start after the keeper died: %+v", x)
	}
	if p := state(t, e.rt, again.InstanceID).ShimPid; p == ss.ShimPid {
		t.Fatal("the dead keeper's pid answered")
	}
}

// A restarted daemon (a new runtime over the same directory) adopts the
// keeper: an exit recorded while it was down keeps its code, a running
// container is adopted and its later exit reported.
func TestKeeperAdoptionAfterDaemonRestart(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	marks := e.root
	whileDown := e.keptSpec("sh", "-c", "while [ ! -e "+marks+"/go5 ]; do sleep 0.05; done; exit 5")
	afterUp := e.keptSpec("sh", "-c", "while [ ! -e "+marks+"/go6 ]; do sleep 0.05; done; exit 6")
	e.start(whileDown)
	e.start(afterUp)
	keeperPid := state(t, e.rt, whileDown.InstanceID).ShimPid

	// The first daemon is gone (its runtime is never read again); the
	// container exits meanwhile.
	os.WriteFile(filepath.Join(marks, "go5"), nil, 0o600)
	waitFor(t, "the first container's lock to be free", func() bool { return !lockHeld(t, e.rt, whileDown.InstanceID) })

	rt2, byID := e.restarted(true)
	if r := byID[whileDown.InstanceID]; r.Alive || r.Exit == nil || r.Exit.ExitCode != 5 {
		t.Fatalf("exit while the daemon was down: %+v", r)
	}
	if r := byID[afterUp.InstanceID]; !r.Alive {
		t.Fatalf("running instance not adopted: %+v", r)
	}
	os.WriteFile(filepath.Join(marks, "go6"), nil, 0o600)
	select {
	case x := <-rt2.Exits():
		if x.InstanceID != afterUp.InstanceID || x.ExitCode != 6 {
			t.Fatalf("exit = %+v", x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the adopted instance's exit never arrived")
	}
	// The restarted daemon starts through the same keeper.
	next := e.keptSpec("sleep", "1000")
	if _, err := rt2.StartPlaced(next, nil); err != nil {
		t.Fatal(err)
	}
	if p := state(t, rt2, next.InstanceID).ShimPid; p != keeperPid {
		t.Fatalf("a second keeper (%d) beside the live one (%d)", p, keeperPid)
	}
	rt2.Kill(next.InstanceID)
	<-rt2.Exits()
}

// A new keeper version starts beside the old one: the old keeps running
// its containers (still signalled through it), takes no new start, and
// exits with its last container.
func TestKeeperUpgradeDrainsTheOldOne(t *testing.T) {
	// A copy of the test binary with bytes appended is another version
	// of the same program.
	old := filepath.Join(t.TempDir(), "old-shim")
	src, err := os.Open(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(old, os.O_WRONLY|os.O_CREATE, 0o700)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(dst, src)
	dst.Write([]byte("old version"))
	src.Close()
	dst.Close()

	oldEnv := newKeeperEnv(t, "", []string{old, "shim"})
	running := oldEnv.keptSpec("sleep", "1000")
	oldEnv.start(running)
	oldKeeper := state(t, oldEnv.rt, running.InstanceID).ShimPid

	e := newKeeperEnv(t, oldEnv.rt.dir, nil)
	e.n = 100
	if _, err := e.rt.Recover(); err != nil {
		t.Fatal(err)
	}
	fresh := e.keptSpec("sleep", "1000")
	e.start(fresh)
	newKeeper := state(t, e.rt, fresh.InstanceID).ShimPid
	if newKeeper == oldKeeper {
		t.Fatal("the new version started through the old keeper")
	}
	if syscall.Kill(oldKeeper, 0) != nil {
		t.Fatal("the old keeper must live while it runs a container")
	}
	if err := e.rt.Kill(running.InstanceID); err != nil {
		t.Fatal(err)
	}
	if x := e.exit(running.InstanceID); x.ExitCode != 137 || x.Reason != "" {
		t.Fatalf("old keeper's container: %+v", x)
	}
	waitFor(t, "the drained old keeper to exit", func() bool { return syscall.Kill(oldKeeper, 0) != nil || zombie(oldKeeper) })
	if _, err := os.Stat(oldEnv.rt.keepers.socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the old keeper left its socket: %v", err)
	}
	if !lockHeld(t, e.rt, fresh.InstanceID) {
		t.Fatal("the new keeper's container must still run")
	}
	e.rt.Kill(fresh.InstanceID)
	e.exit(fresh.InstanceID)
}

// A start must come with the instance's own lock, held: a keeper handed
// another file, or the lock file unlocked, runs nothing (the rule "lock
// held <=> instance alive" would not hold), and an ID may not leave the
// data directory.
func TestKeeperRefusesAStartWithoutItsLock(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	first := e.keptSpec("true")
	e.start(first) // brings the keeper up
	e.exit(first.InstanceID)
	kc, err := e.rt.keepers.ensure()
	if err != nil {
		t.Fatal(err)
	}
	s := e.keptSpec("sh", "-c", "touch "+e.root+"/ran")
	dir := e.rt.instanceDir(s.InstanceID)
	os.Mkdir(dir, 0o700)
	shim.WriteJSONAtomic(filepath.Join(dir, shim.SpecFile), s)
	lock, _ := os.OpenFile(filepath.Join(dir, shim.LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	defer lock.Close()
	other, _ := os.Open(filepath.Join(dir, shim.SpecFile))
	defer other.Close()
	for name, req := range map[string]struct {
		id string
		fd *os.File
	}{
		"another file":     {s.InstanceID, other},
		"the lock, unheld": {s.InstanceID, lock},
		"no descriptor":    {s.InstanceID, nil},
		"a path":           {"../" + filepath.Base(e.rt.dir) + "/" + s.InstanceID, lock},
	} {
		var fds []int
		if req.fd != nil {
			fds = append(fds, int(req.fd.Fd()))
		}
		if _, err := e.rt.keepers.request(kc.socket, shim.KeeperRequest{Op: shim.KeeperStart, Instance: req.id}, fds...); err == nil {
			t.Fatalf("%s: the keeper started the instance", name)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if _, err := os.Stat(filepath.Join(e.root, "ran")); err == nil {
		t.Fatal("a refused start ran its command")
	}
}

// A keeper refuses a data directory others may write to: whoever can
// rename an instance directory there could have it run their spec.json
// as root. The start fails; nothing runs.
func TestKeeperRefusesADataDirOthersMayWrite(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	e := newKeeperEnv(t, filepath.Join(data, shim.InstancesDir), nil)
	if err := os.Chmod(data, 0o1777); err != nil {
		t.Fatal(err)
	}
	s := e.keptSpec("sh", "-c", "touch "+e.root+"/ran")
	if _, err := e.rt.StartPlaced(s, nil); err == nil {
		t.Fatal("a keeper ran a container from a data directory anyone may write to")
	} else if !strings.Contains(err.Error(), "keeper exited") {
		t.Fatalf("start failed for another reason: %v", err)
	}
	if _, err := os.Stat(filepath.Join(e.root, "ran")); err == nil {
		t.Fatal("the container ran")
	}
}

// A keeper whose watch connection broke and that cannot be watched again
// at once (its socket unreachable for a while) is watched again once it
// can: the exits of its containers are still reported.
func TestKeeperWatchedAgainAfterAFailedAttempt(t *testing.T) {
	e := newKeeperEnv(t, "", nil)
	flag := filepath.Join(e.root, "end")
	s := e.keptSpec("sh", "-c", "while [ ! -e "+flag+" ]; do sleep 0.05; done; exit 5")
	e.start(s)
	up := e.keptSpec("sleep", "1000") // keeps the keeper up once s ends
	e.start(up)
	ss := state(t, e.rt, s.InstanceID)
	away := ss.Keeper + ".away"
	if err := os.Rename(ss.Keeper, away); err != nil {
		t.Fatal(err)
	}
	if n := shutdownKeeperConns(t, ss.ShimPid); n == 0 {
		t.Fatal("the keeper has no connection to break")
	}
	time.Sleep(300 * time.Millisecond) // the daemon's first attempts to watch again fail meanwhile
	if err := os.Rename(away, ss.Keeper); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(flag, nil, 0o600)
	if x := e.exit(s.InstanceID); x.ExitCode != 5 {
		t.Fatalf("exit %+v", x)
	}
	if err := e.rt.Kill(up.InstanceID); err != nil {
		t.Fatal(err)
	}
	e.exit(up.InstanceID)
}

// shutdownKeeperConns breaks every connection the keeper accepted (the
// daemon's watch), through copies of its descriptors (pidfd_getfd), and
// returns how many.
func shutdownKeeperConns(t *testing.T, pid int) int {
	t.Helper()
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	entries, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ent := range entries {
		target, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		fd, err := unix.PidfdGetfd(pfd, target, 0)
		if err != nil {
			continue
		}
		sa, err := unix.Getsockname(fd)
		listening, _ := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_ACCEPTCONN)
		if u, ok := sa.(*unix.SockaddrUnix); err == nil && ok && strings.Contains(u.Name, "keeper-") && listening == 0 {
			unix.Shutdown(fd, unix.SHUT_RDWR)
			n++
		}
		unix.Close(fd)
	}
	return n
}
