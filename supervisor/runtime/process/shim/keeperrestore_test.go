package shim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/prereq"
	"golang.org/x/sys/unix"
)

// A keeper that cannot leave a container's cgroups after forking it (where
// ptrace is refused and it joins them itself; its own cgroup gone, say) must not run on charged as that container: the
// container is killed, the start fails saying why, later forks are
// refused, and the keeper exits once the start is answered.
func TestKeeperStuckInAContainerCgroupExits(t *testing.T) {
	sleep := lookPath(t, "sleep")
	traceForks = false // as where ptrace is refused: the keeper joins and goes back
	t.Cleanup(func() { traceForks = true })
	k := newTestKeeper(t)
	exited := -1
	k.exit = func(code int) { exited = code }
	lock := newTestInstance(t, k, "a", sleep, "100")
	var spec Spec
	specPath := filepath.Join(k.dir, InstancesDir, "a", SpecFile)
	if err := ReadJSON(specPath, &spec); err != nil {
		t.Fatal(err)
	}
	spec.Cgroup.Return = []string{filepath.Join(t.TempDir(), "gone", "cgroup.procs")}
	if err := WriteJSONAtomic(specPath, spec); err != nil {
		t.Fatal(err)
	}
	go func() {
		r := <-k.forks
		r.done <- k.fork(r.k)
	}()
	st, err := startKept(t, k, "a", lock)
	if err == nil || !strings.Contains(err.Error(), "leaving the container's cgroups") {
		t.Fatalf("start while the keeper stays in the container's cgroup: %+v, %v", st, err)
	}
	for _, pid := range children() {
		if comm, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm")); strings.TrimSpace(string(comm)) == "sleep" {
			t.Fatalf("the container (pid %d) outlived its failed start", pid)
		}
	}
	if !lockFree(t, k, "a") {
		t.Fatal("the failed start's lock is held")
	}
	k.exitIfBroken()
	if exited != 1 {
		t.Fatal("the keeper did not exit")
	}
	next := newTestInstance(t, k, "b", sleep, "100")
	go func() {
		r := <-k.forks
		r.done <- k.fork(r.k)
	}()
	if st, err := startKept(t, k, "b", next); err == nil {
		t.Fatalf("a broken keeper started another container: %+v", st)
	}
}

// A leader is given its oom_score_adj and cgroup v1 groups while stopped
// at its exec: the keeper never joins them or takes the score itself.
func TestKeeperPlacesTheLeaderItself(t *testing.T) {
	prereq.Root(t, "setting another process's oom_score_adj")
	sleep := lookPath(t, "sleep")
	k := newTestKeeper(t)
	lock := newTestInstance(t, k, "a", sleep, "100")
	var spec Spec
	specPath := filepath.Join(k.dir, InstancesDir, "a", SpecFile)
	if err := ReadJSON(specPath, &spec); err != nil {
		t.Fatal(err)
	}
	score := 777
	spec.OOMScoreAdj = &score
	if err := WriteJSONAtomic(specPath, spec); err != nil {
		t.Fatal(err)
	}
	own, _ := os.ReadFile("/proc/self/oom_score_adj")
	go func() {
		r := <-k.forks
		r.done <- k.fork(r.k)
	}()
	st, err := startKept(t, k, "a", lock)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(st.LeaderPid), "oom_score_adj"))
	if strings.TrimSpace(string(got)) != "777" {
		t.Fatalf("leader's oom_score_adj = %q", got)
	}
	if now, _ := os.ReadFile("/proc/self/oom_score_adj"); string(now) != string(own) {
		t.Fatalf("the keeper's own oom_score_adj changed: %q -> %q", own, now)
	}
	procs, _ := os.ReadFile(spec.Cgroup.Procs[0])
	if strings.TrimSpace(string(procs)) != strconv.Itoa(st.LeaderPid) {
		t.Fatalf("cgroup.procs got %q, not the leader %d: the keeper joined it itself", procs, st.LeaderPid)
	}
	if status, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(st.LeaderPid), "status")); !strings.Contains(string(status), "TracerPid:\t0\n") || strings.Contains(string(status), "State:\tt") || strings.Contains(string(status), "State:\tT") {
		t.Fatalf("the leader is still traced or stopped:\n%s", status)
	}
}

// A keeper waiting for its version's lock while the daemon removes that
// lock file (a gone version's, as it thought) must not end up holding the
// unlinked file: a second keeper would take the new one beside it.
func TestKeeperLockTakenIsTheOneAtItsPath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keeper-v.lock")
	held, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unix.Flock(int(held.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	got := make(chan *os.File, 1)
	go func() {
		lock, _ := lockKeeper(path, 10*time.Second)
		got <- lock
	}()
	// Once the waiter has the old file open, it is unlinked and let go.
	for deadline := time.Now().Add(10 * time.Second); openCount(t, path) < 2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("lockKeeper never opened the lock file")
		}
	}
	os.Remove(path)
	held.Close()
	lock := <-got
	if lock == nil {
		t.Fatal("no lock taken")
	}
	defer lock.Close()
	var fst, st unix.Stat_t
	if err := unix.Fstat(int(lock.Fd()), &fst); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(path, &st); err != nil || fst.Ino != st.Ino {
		t.Fatalf("the lock held is not the file at %s (%v)", path, err)
	}
}

// openCount is how many of this process's descriptors name path.
func openCount(t *testing.T, path string) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", fd.Name())); err == nil && target == path {
			n++
		}
	}
	return n
}
