package sandbox

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/prereq"
)

// A process that joins the pod's PID namespace sees the init as pid 1;
// an init that dies is replaced by a new namespace; Remove kills the init.
func TestEnsurePIDHoldsTheNamespace(t *testing.T) {
	requireRoot(t)
	nsenter, err := exec.LookPath("nsenter")
	if err != nil {
		prereq.Missing(t, "nsenter (util-linux): %v", err)
	}
	s := Sandbox{Dir: filepath.Join(t.TempDir(), "uid-2")}
	t.Cleanup(func() { s.Remove() })
	init := []string{"sleep", "3600"} // any long-lived process holds it
	path, err := s.EnsurePID(init)
	if err != nil {
		t.Fatal(err)
	}
	first := s.initPid()
	if first <= 0 || !isNsfs(path) {
		t.Fatalf("init pid %d, bound %v", first, isNsfs(path))
	}
	if again, err := s.EnsurePID(init); err != nil || again != path || s.initPid() != first {
		t.Fatalf("second EnsurePID: %q %v, init %d (want %d kept)", again, err, s.initPid(), first)
	}
	joinable(t, nsenter, path)

	unix.Kill(first, unix.SIGKILL)
	deadline := time.Now().Add(5 * time.Second)
	for s.initPid() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if s.initPid() != 0 {
		t.Fatal("a killed init still counts as alive")
	}
	// A namespace whose init died takes no process: the new one does.
	if _, err := s.EnsurePID(init); err != nil {
		t.Fatal(err)
	}
	second := s.initPid()
	if second <= 0 || second == first {
		t.Fatalf("init %d (was %d): want a new init", second, first)
	}
	joinable(t, nsenter, path)

	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for unix.Kill(second, 0) == nil && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if unix.Kill(second, 0) == nil {
		t.Fatal("Remove left the init running")
	}
}

// joinable checks that a process can join the PID namespace at path and
// is not its pid 1 there (the init is).
func joinable(t *testing.T, nsenter, path string) {
	t.Helper()
	out, err := exec.Command(nsenter, "--pid="+path, "--", "sh", "-c", "echo $$").CombinedOutput()
	if err != nil {
		t.Fatalf("joining the PID namespace: %v: %s", err, out)
	}
	if pid := strings.TrimSpace(string(out)); pid == "1" || pid == "" {
		t.Fatalf("joined process has pid %q, want a pid after the init's", pid)
	}
}
