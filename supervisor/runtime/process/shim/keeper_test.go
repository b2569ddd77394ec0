package shim

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/prereq"
)

// newTestKeeper is a keeper of a fresh data directory whose forks the
// test serves itself (no fork thread: it would reap the test's children).
func newTestKeeper(t *testing.T) *keeper {
	t.Helper()
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, InstancesDir), 0o700); err != nil {
		t.Fatal(err)
	}
	cp, err := newCopier()
	if err != nil {
		t.Fatal(err)
	}
	return &keeper{dir: dir, version: "test", copy: cp, forks: make(chan forkRequest),
		byPid: map[int]*kept{}, byID: map[string]*kept{}, watchers: map[*net.UnixConn]bool{}, quit: make(chan struct{})}
}

// newTestInstance writes an instance's spec (its "cgroup" a plain
// cgroup.procs file, which the keeper only writes and reads) and returns
// its lock, locked, as the daemon hands it over.
func newTestInstance(t *testing.T, k *keeper, id string, argv ...string) *os.File {
	t.Helper()
	dir := filepath.Join(k.dir, InstancesDir, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	procs := filepath.Join(t.TempDir(), "cgroup.procs")
	if err := os.WriteFile(procs, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	spec := Spec{InstanceID: id, Argv: argv, LogPath: filepath.Join(t.TempDir(), "pod", "c", "0.log"),
		Cgroup: Cgroup{Procs: []string{procs}}}
	if err := WriteJSONAtomic(filepath.Join(dir, SpecFile), spec); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() })
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return lock
}

// lockFree reports whether nobody holds an instance's lock.
func lockFree(t *testing.T, k *keeper, id string) bool {
	f, err := os.Open(filepath.Join(k.dir, InstancesDir, id, LockFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil
}

// startKept hands a copy of lock over with a start, as the daemon does,
// and closes the daemon's copy once answered.
func startKept(t *testing.T, k *keeper, id string, lock *os.File) (*State, error) {
	t.Helper()
	fd, err := unix.Dup(int(lock.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := k.start(id, os.NewFile(uintptr(fd), "lock"))
	lock.Close()
	if st != nil {
		t.Cleanup(func() {
			unix.Kill(st.LeaderPid, unix.SIGKILL)
			var ws unix.WaitStatus
			unix.Wait4(st.LeaderPid, &ws, 0, nil)
		})
	}
	return st, err
}

// A kill that comes while an instance is still starting (the daemon kills
// a start it got no answer to) stops it: it never runs, its start fails
// with the exit recorded, and its lock comes free.
func TestKeeperKillWhileStartingStopsIt(t *testing.T) {
	sleep := lookPath(t, "sleep")
	k := newTestKeeper(t)
	lock := newTestInstance(t, k, "a", sleep, "100")
	go func() {
		r := <-k.forks
		k.signal("a", KillSignal) // as the fork thread is about to fork
		r.done <- k.fork(r.k)
	}()
	st, err := startKept(t, k, "a", lock)
	if err == nil {
		t.Fatalf("a container killed while starting runs: leader %d", st.LeaderPid)
	}
	var exit ExitStatus
	if err := ReadJSON(filepath.Join(k.dir, InstancesDir, "a", ExitFile), &exit); err != nil || exit.Reason != "StartError" {
		t.Fatalf("exit %+v, %v", exit, err)
	}
	if !lockFree(t, k, "a") {
		t.Fatal("the lock of a start that failed is held")
	}
}

// A started instance whose state cannot be written (disk full) is killed
// and its start fails: a restarted daemon could not adopt it.
func TestKeeperStartWithoutStateKillsTheContainer(t *testing.T) {
	sleep := lookPath(t, "sleep")
	k := newTestKeeper(t)
	lock := newTestInstance(t, k, "a", sleep, "100")
	// A directory where shim.json goes: writing it fails.
	if err := os.Mkdir(filepath.Join(k.dir, InstancesDir, "a", StateFile), 0o700); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := <-k.forks
		r.done <- k.fork(r.k)
	}()
	st, err := startKept(t, k, "a", lock)
	if err == nil {
		t.Fatalf("a container whose state was not written runs: leader %d", st.LeaderPid)
	}
	k.mu.Lock()
	leader := k.byID["a"].leader
	k.mu.Unlock()
	var ws unix.WaitStatus
	if _, err := unix.Wait4(leader, &ws, 0, nil); err != nil || !ws.Signaled() || ws.Signal() != unix.SIGKILL {
		t.Fatalf("leader %d: %v, %v", leader, ws, err)
	}
}

// Once an ended instance's process group was seen empty, its id is not
// signalled again while the instance's cgroup empties: another process
// group may have taken it.
func TestKeeperLeavesAReusedProcessGroupAlone(t *testing.T) {
	k := newTestKeeper(t)
	// reuser's pid names no group until it makes one (setsid), as a
	// process that got the leader's pid after the group emptied would.
	reuser := exec.Command("sh", "-c", "read x; exec "+lookPath(t, "setsid")+" "+lookPath(t, "sleep")+" 100")
	in, err := reuser.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	lingering := exec.Command(lookPath(t, "sleep"), "100") // still in the cgroup
	later := exec.Command(lookPath(t, "sleep"), "100")     // in it next
	for _, c := range []*exec.Cmd{reuser, lingering, later} {
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	procs := filepath.Join(t.TempDir(), "cgroup.procs")
	if err := os.WriteFile(procs, []byte(strconv.Itoa(lingering.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	pid := reuser.Process.Pid
	k.byPid[pid] = &kept{id: "a", leader: pid, pidfd: -1, reaped: true, spec: Spec{Cgroup: Cgroup{Procs: []string{procs}}}}
	if !k.endInstances() {
		t.Fatal("an instance with a process in its cgroup ended")
	}
	lingering.Wait() // killed; the cgroup now holds another process
	if err := os.WriteFile(procs, []byte(strconv.Itoa(later.Process.Pid)), 0o600); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("\n"))
	in.Close()
	waitGroupLeader(t, pid)
	k.endInstances()
	// A SIGKILL sent before this SIGTERM is the one it dies of.
	reuser.Process.Signal(unix.SIGTERM)
	var ee *exec.ExitError
	if err := reuser.Wait(); !errors.As(err, &ee) || !strings.Contains(ee.Error(), "terminated") {
		t.Fatalf("the process group that took the leader's id was killed: %v", err)
	}
}

// waitGroupLeader waits until pid leads a process group of its own.
func waitGroupLeader(t *testing.T, pid int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if pgid, err := unix.Getpgid(pid); err == nil && pgid == pid {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d made no process group of its own", pid)
		}
	}
}

// Without a pidfd (pidfd_open failed: out of descriptors), a signal still
// reaches a leader not yet reaped, by its pid.
func TestKeeperSignalsALeaderWithoutPidfd(t *testing.T) {
	k := newTestKeeper(t)
	leader := exec.Command(lookPath(t, "sleep"), "100")
	if err := leader.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { leader.Process.Kill() })
	k.byID["a"] = &kept{id: "a", leader: leader.Process.Pid, pidfd: -1}
	k.signal("a", unix.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- leader.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(ee.Error(), "terminated") {
			t.Fatalf("leader ended with %v, not SIGTERM", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not reach a leader without a pidfd")
	}
}

func lookPath(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err != nil {
		prereq.Missing(t, "%s: %v", name, err)
	}
	return path
}
