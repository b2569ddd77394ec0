package shim

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// A keeper that cannot leave a container's cgroups after forking it (its
// own cgroup gone, say) must not run on charged as that container: the
// container is killed, the start fails saying why, later forks are
// refused, and the keeper exits once the start is answered.
func TestKeeperStuckInAContainerCgroupExits(t *testing.T) {
	sleep := lookPath(t, "sleep")
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
