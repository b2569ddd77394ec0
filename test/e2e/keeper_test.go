package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// keeperPids lists the pids of the daemon's keepers (podvisor-shim
// --keeper DATA-DIR).
func keeperPids(t *testing.T, d *daemon) []int {
	entries, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var out []int
	for _, e := range entries {
		data, err := os.ReadFile(e)
		if err == nil && strings.HasSuffix(string(data), "\x00--keeper\x00"+d.data+"\x00") {
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(e)))
			out = append(out, pid)
		}
	}
	return out
}

func countKeepers(t *testing.T, d *daemon) int { return len(keeperPids(t, d)) }

// instanceLocksFree reports whether no instance lock under the daemon's
// data directory is held.
func instanceLocksFree(t *testing.T, d *daemon) bool { return heldLocks(t, d) == 0 }

// Every process pod runs under one keeper, not a shim each, and the
// keeper outlives the daemon.
func TestKeeperRunsEveryProcessPod(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.start()
	for _, name := range []string{"k1", "k2", "k3"} {
		d.write(name+".yaml", processPod(name, "Always", 2, "echo hello from "+name+"; exec sleep 1000"))
	}
	for _, name := range []string{"k1", "k2", "k3"} {
		d.waitPod(name, 10*time.Second, running)
	}
	if n, s := countKeepers(t, d), countShims(t, d); n != 1 || s != 0 {
		t.Fatalf("%d keepers and %d shims for 3 pods, want 1 and 0", n, s)
	}
	// Running comes with the fork; the line reaches the log when the
	// keeper's copier gets to it.
	waitForValue(t, 10*time.Second, "k2's line in its log through the keeper", func() string {
		out, _, code := d.cli("logs", "k2")
		return fmt.Sprintf("%d %q", code, out)
	}, func(s string) bool { return s == fmt.Sprintf("0 %q", "hello from k2\n") })
	keeper := keeperPids(t, d)[0]
	d.stop(syscall.SIGKILL)
	if !alive(keeper) {
		t.Fatal("the keeper must outlive the daemon")
	}
	d.start()
	d.waitPod("k1", 10*time.Second, func(p *v1.Pod) bool { return running(p) && p.Status.ContainerStatuses[0].RestartCount == 0 })
	if pids := keeperPids(t, d); len(pids) != 1 || pids[0] != keeper {
		t.Fatalf("keepers after the daemon restarted: %v, want only %d", pids, keeper)
	}
}

// A keeper killed with -9 takes every container with it: every lock comes
// free, each container ends ContainerStatusUnknown/137 and is restarted by
// its policy under a new keeper.
func TestKeeperKilledRestartsEveryPod(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.start()
	names := []string{"a", "b", "c"}
	pids := filepath.Join(d.dir, "pids")
	for _, name := range names {
		// $$ is a literal $ in a pod's command: $$$$ is the shell's $$.
		d.write(name+".yaml", processPod(name, "Always", 2, "echo $$$$ >> "+pids+"; exec sleep 1000"))
	}
	for _, name := range names {
		d.waitPod(name, 10*time.Second, running)
	}
	waitFor(t, "three containers to write their pids", func() bool { return len(readLines(pids)) == 3 })
	first := readLines(pids)
	old := keeperPids(t, d)
	if len(old) != 1 {
		t.Fatalf("keepers: %v", old)
	}
	syscall.Kill(old[0], syscall.SIGKILL)
	waitFor(t, "the killed keeper to be gone", func() bool { return !alive(old[0]) })
	for _, name := range names {
		p := d.waitPod(name, 15*time.Second, func(p *v1.Pod) bool {
			cs := p.Status.ContainerStatuses[0]
			return cs.RestartCount == 1 && cs.State.Running != nil
		})
		last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
		if last == nil || last.Reason != "ContainerStatusUnknown" || last.ExitCode != 137 {
			t.Fatalf("%s: lastState = %+v", name, last)
		}
	}
	if now := keeperPids(t, d); len(now) != 1 || now[0] == old[0] {
		t.Fatalf("keepers after the restart: %v (the killed one was %d)", now, old[0])
	}
	for _, p := range first {
		pid, _ := strconv.Atoi(p)
		if alive(pid) && !zombieProc(pid) {
			t.Fatalf("container %d outlived its keeper", pid)
		}
	}
	if held := heldLocks(t, d); held != len(names) {
		t.Fatalf("%d instance locks held for %d running containers: the killed keeper's must be free", held, len(names))
	}
}

func zombieProc(pid int) bool {
	stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return strings.Contains(string(stat), ") Z ")
}

// heldLocks counts the instance locks someone holds.
func heldLocks(t *testing.T, d *daemon) int {
	locks, _ := filepath.Glob(filepath.Join(d.data, "containers", "*", "lock"))
	n := 0
	for _, l := range locks {
		f, err := os.Open(l)
		if err != nil {
			continue
		}
		if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			n++
		}
		f.Close()
	}
	return n
}

// A container that exits while the daemon is down (killed -9) has its
// exit code recorded by the keeper; the restarted daemon reports it.
func TestKeeperExitWhileDaemonDown(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.start()
	marker := filepath.Join(d.dir, "go")
	d.write("job.yaml", processPod("job", "Never", 2, "while [ ! -e "+marker+" ]; do sleep 0.05; done; exit 3"))
	d.waitPod("job", 10*time.Second, running)
	d.stop(syscall.SIGKILL)
	writeString(marker, "")
	waitFor(t, "the job's exit to be recorded and its lock freed", func() bool {
		exits, _ := filepath.Glob(filepath.Join(d.data, "containers", "*", "exit.json"))
		return len(exits) == 1 && instanceLocksFree(t, d)
	})
	d.start()
	p := d.waitPod("job", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	term := p.Status.ContainerStatuses[0].State.Terminated
	if term == nil || term.ExitCode != 3 || term.Reason != "Error" {
		t.Fatalf("state after the restart: %s", describePod(p))
	}
}
