package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The properties docs/footprint.md relies on: an instance's lock is held
// while its container lives, its exit is recorded before the lock is
// free, and when the keeper dies every container dies with it and every
// lock is free.
func TestKeeperLocksExitsAndDeath(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "keeper")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building the keeper: %v\n%s", err, out)
	}
	dir := t.TempDir()
	marks := t.TempDir()
	// Container i writes its pid, then waits for DIR/i.go: container 0 is
	// told to exit with 3 and the others outlive the keeper.
	cmd := exec.Command(bin, "-dir", dir, "-n", "3", "-sh",
		fmt.Sprintf(`i=$(basename "$INSTANCE"); echo $$ > %[1]s/$i.pid; while [ ! -e %[1]s/$i.go ]; do sleep 0.05; done; exit 3`, marks))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("keeper did not start its containers: %q %v", line, err)
	}
	pids := make([]int, 3)
	for i := range pids {
		waitFor(t, fmt.Sprintf("container %d to write its pid", i), func() bool {
			data, err := os.ReadFile(filepath.Join(marks, fmt.Sprint(i)+".pid"))
			pids[i], _ = strconv.Atoi(strings.TrimSpace(string(data)))
			return err == nil && pids[i] > 0
		})
		if !locked(t, filepath.Join(dir, fmt.Sprint(i), "lock")) {
			t.Fatalf("container %d runs but its lock is free", i)
		}
	}

	os.WriteFile(filepath.Join(marks, "0.go"), nil, 0o644)
	waitFor(t, "container 0's lock to be released after it exits", func() bool {
		return !locked(t, filepath.Join(dir, "0", "lock"))
	})
	var st exitStatus
	data, err := os.ReadFile(filepath.Join(dir, "0", "exit.json"))
	if err != nil || json.Unmarshal(data, &st) != nil || st.ExitCode != 3 {
		t.Fatalf("exit record when the lock was free: %s, %v (want exit code 3)", data, err)
	}

	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	killed = true
	for i := 1; i < 3; i++ {
		waitFor(t, fmt.Sprintf("container %d to die with the keeper", i), func() bool {
			return syscall.Kill(pids[i], 0) == syscall.ESRCH
		})
		if locked(t, filepath.Join(dir, fmt.Sprint(i), "lock")) {
			t.Fatalf("container %d is gone but its lock is held", i)
		}
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprint(i), "exit.json")); err == nil {
			t.Fatalf("container %d has an exit record though its keeper was killed", i)
		}
	}
}

// locked reports whether another process holds the flock on path.
func locked(t *testing.T, path string) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return true
	}
	unix.Flock(int(f.Fd()), unix.LOCK_UN)
	return false
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}
