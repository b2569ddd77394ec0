package e2e

import (
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

func TestGarbageCollectionOfFinishedInstances(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("backoff: {initial: 1s, max: 1s}\ngc: {maxDeadPerContainer: 1, maxDeadContainers: 3}\n")
	d.start()
	d.write("crash.yaml", processPod("crash", "Always", 2, "echo run; exit 1"))
	d.write("done1.yaml", processPod("done1", "Never", 2, "echo done"))
	d.write("done2.yaml", processPod("done2", "Never", 2, "echo done"))
	d.waitPod("crash", 20*time.Second, func(p *v1.Pod) bool { return p.Status.ContainerStatuses[0].RestartCount >= 5 })
	instances := func(prefix string) []string {
		dirs, _ := filepath.Glob(filepath.Join(d.data, "containers", prefix+"*"))
		return dirs
	}
	p := d.waitPod("crash", time.Second, func(*v1.Pod) bool { return true })
	// Removals run after the exit is saved, off the loop: with a 1 s
	// backoff a late one may leave one over for a moment, never more.
	waitFor(t, "maxDeadPerContainer 1: the current and one finished instance, and their logs", func() bool {
		got := instances(string(p.UID))
		logs, _ := filepath.Glob(filepath.Join(d.data, "logs", "*"+string(p.UID), "main", "*.log*"))
		if len(got) > 3 || len(logs) > 3 {
			t.Fatalf("maxDeadPerContainer 1 keeps the current and one finished instance, found %d: %v; logs %v", len(got), got, logs)
		}
		return len(got) <= 2 && len(logs) <= 2
	})
	// Three containers each keep their newest finished instance; beyond
	// that the device bound of 3 applies. It is enforced when the daemon
	// handles an exit, so the crash loop's newest exit file may be one
	// over it for a moment, never more.
	waitFor(t, "maxDeadContainers 3: at most 3 finished instances kept", func() bool {
		exits, _ := filepath.Glob(filepath.Join(d.data, "containers", "*", "exit.json"))
		if len(exits) > 4 {
			t.Fatalf("maxDeadContainers 3: %d finished instances kept", len(exits))
		}
		return len(exits) <= 3
	})
	if prev, _, code := d.cli("logs", "crash", "--previous"); code != 0 || prev != "run\n" {
		t.Fatalf("--previous must survive collection: %d %q", code, prev)
	}
}

func TestShimKilledWhileDaemonDown(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("victim.yaml", processPod("victim", "Always", 2, "exec sleep 1000"))
	d.waitPod("victim", 10*time.Second, running)
	d.stop(syscall.SIGKILL)
	// The shim (or keeper) dies without recording an exit; its container
	// dies with it (parent-death signal).
	out, _ := osexec.Command("pgrep", "-f", shimPattern(d)).Output()
	for _, f := range strings.Fields(string(out)) {
		pid, _ := strconv.Atoi(f)
		syscall.Kill(pid, syscall.SIGKILL)
	}
	waitFor(t, "every shim and keeper of the killed daemon to be gone", func() bool { return countShims(t, d)+countKeepers(t, d) == 0 })
	d.start()
	p := d.waitPod("victim", 10*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.RestartCount == 1 && cs.State.Running != nil
	})
	last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated
	if last == nil || last.Reason != "ContainerStatusUnknown" || last.ExitCode != 137 {
		t.Fatalf("lastState = %+v", last)
	}
}

func TestTerminationResumesAfterDaemonRestart(t *testing.T) {
	d := newDaemon(t)
	d.start()
	marker := filepath.Join(d.dir, "terms")
	// A 6 s grace, killed a second in: the test's own steps between the
	// SIGTERM and the kill (the trap's write, a poll) have 5 s of slack.
	d.write("slowstop.yaml", processPod("slowstop", "Always", 6,
		"trap 'echo term >> "+marker+"' TERM; touch "+marker+".ready; while true; do sleep 0.05; done"))
	waitFor(t, "the workload to set its TERM trap (marker .ready)", func() bool { return exists(marker + ".ready") }) // the trap is set
	d.remove("slowstop.yaml")
	waitFor(t, "the workload to record the SIGTERM", func() bool { return len(readLines(marker)) == 1 })
	time.Sleep(time.Second)
	d.stop(syscall.SIGKILL) // one second into a six-second grace period
	restarted := time.Now()
	d.start()
	d.waitGone("slowstop", 10*time.Second)
	took := time.Since(restarted)
	if took < 5900*time.Millisecond {
		t.Fatalf("after a restart the grace period starts over (6s); the pod was gone after %v", took)
	}
	// The restarted grace's end killed it (the trap outlives SIGTERM);
	// how soon after is a figure.
	waitGraceKills(t, d, "slowstop", 1)
	t.Logf("after a restart: gone %v after the daemon's start (grace 6s)", took)
	if got := len(readLines(marker)); got != 2 {
		t.Fatalf("the stop signal must be sent again after the restart: %d signals seen", got)
	}
}
