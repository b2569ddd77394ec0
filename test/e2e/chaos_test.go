package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// chaosPods are long-running pods whose workload is a shell named by a tag
// ($0) unique per pod name that survives content changes, so two processes
// with one tag are two live copies of one pod. The shell lingers 200ms
// after SIGTERM, as real services do, so an overlap would be visible.
const chaosPods = 5

// chaosRun is a prefix of the tags unique to one run of the test, so the
// counts see only this run's workloads: never another test's, another
// package's or another checkout's running at the same time on the host.
func chaosRun() string { return fmt.Sprintf("pvchaos%d-%d", os.Getpid(), time.Now().UnixNano()) }

func chaosTag(run string, i int) string { return fmt.Sprintf("%s-%d", run, i) }

func chaosManifest(run string, i, version int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: chaos-%d
  labels: {version: "v%d"}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sh", "-c", "trap 'sleep 0.2; exit 0' TERM; while true; do sleep 0.1; done", "%s"]
`, i, version, chaosTag(run, i))
}

// workloads counts the run's live (non-zombie) processes per chaos tag.
func workloads(run string) map[string]int {
	counts := map[string]int{}
	for tag, owners := range workloadOwners(run) {
		counts[tag] = len(owners)
	}
	return counts
}

// workloadOwners lists, per chaos tag, each live copy's pid and the
// instance its parent shim runs, to say which instances overlapped. A
// shell forking to run a command has a child with its own command line
// until the exec: such a child of a copy is part of that copy, not a
// second one.
func workloadOwners(run string) map[string][]string {
	type proc struct{ tag, ppid, owner string }
	copies := map[string]proc{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		args := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
		if err != nil || len(args) != 4 || args[0] != "sh" || !strings.HasPrefix(args[3], run+"-") {
			continue
		}
		stat, _ := os.ReadFile(filepath.Join(filepath.Dir(p), "stat"))
		if strings.Contains(string(stat), ") Z ") {
			continue
		}
		pid := filepath.Base(filepath.Dir(p))
		owner := "pid " + pid
		if fields := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+1:]); len(fields) > 1 {
			parent, _ := os.ReadFile("/proc/" + fields[1] + "/cmdline")
			owner += " shim " + filepath.Base(strings.TrimRight(strings.ReplaceAll(string(parent), "\x00", " "), " "))
		}
		ppid := ""
		if fields := strings.Fields(string(stat)[strings.LastIndexByte(string(stat), ')')+1:]); len(fields) > 1 {
			ppid = fields[1]
		}
		copies[pid] = proc{tag: args[3], ppid: ppid, owner: owner}
	}
	owners := map[string][]string{}
	for _, p := range copies {
		if parent, ok := copies[p.ppid]; ok && parent.tag == p.tag {
			continue // a fork of the copy, not a copy
		}
		owners[p.tag] = append(owners[p.tag], p.owner)
	}
	return owners
}

func TestChaosAtMostOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped under -short (testing.Short): the chaos test runs in the full suite, make test")
	}
	d := newDaemon(t)
	d.start()
	t.Cleanup(func() { // runs before the daemon's cleanup stops it
		if t.Failed() && d.cmd != nil {
			out, errOut, code := d.cli("get", "pods")
			t.Logf("get pods at the failure (exit %d):\n%s%s", code, out, errOut)
			if code != 0 { // a daemon that does not answer: where is it stuck?
				d.cmd.Process.Signal(syscall.SIGQUIT)
				time.Sleep(500 * time.Millisecond)
			}
			for i := 0; i < chaosPods; i++ {
				out, _, _ := d.cli("describe", "pod", fmt.Sprintf("chaos-%d", i))
				t.Logf("describe pod chaos-%d:\n%s", i, out)
			}
		}
	})
	run := chaosRun()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 42))
	t.Logf("seed %d", seed)

	// The observer: any moment with two copies of a pod is a failure.
	var mu sync.Mutex
	var violations []string
	stop := make(chan struct{})
	observed := make(chan int, 1)
	var stopOnce sync.Once
	stopObserver := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(stopObserver) // also when the test fails before its end
	go func() {
		scans := 0
		for {
			select {
			case <-stop:
				observed <- scans
				return
			default:
			}
			for tag, owners := range workloadOwners(run) {
				if len(owners) > 1 {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("%d copies of %s: %v", len(owners), tag, owners))
					mu.Unlock()
				}
			}
			scans++
			time.Sleep(2 * time.Millisecond)
		}
	}()

	version := make([]int, chaosPods)
	present := make([]bool, chaosPods)
	ops := map[string]int{}
	const total = 240
	for op := 0; op < total; op++ {
		i := rng.IntN(chaosPods)
		switch r := rng.IntN(100); {
		case r < 35: // create or change: a new instance replaces the old
			version[i]++
			d.write(fmt.Sprintf("chaos-%d.yaml", i), chaosManifest(run, i, version[i]))
			present[i] = true
			ops["write"]++
		case r < 50:
			if present[i] {
				d.remove(fmt.Sprintf("chaos-%d.yaml", i))
				present[i] = false
				ops["remove"]++
			}
		case r < 62:
			if present[i] {
				zero := int64(0)
				d.client.Delete(context.Background(), "default", fmt.Sprintf("chaos-%d", i), &zero, rng.IntN(2) == 0)
				ops["delete"]++
			}
		case r < 88: // kill -9 somewhere inside whatever is in flight
			time.Sleep(time.Duration(rng.IntN(15)) * time.Millisecond)
			d.stop(syscall.SIGKILL)
			d.start()
			ops["kill -9"]++
		default:
			d.stop(syscall.SIGTERM)
			d.start()
			ops["sigterm"]++
		}
		time.Sleep(time.Duration(rng.IntN(20)) * time.Millisecond)
	}

	// Settle: every present pod runs exactly once, the others not at all.
	// The last operation may have been a kill -9, and a daemon recovering
	// waits up to 10 s for a shim to describe itself and 10 s more for one
	// killed to let go of its lock: hence 30 s, not the usual 10.
	want := map[string]int{}
	for i := 0; i < chaosPods; i++ {
		if present[i] {
			want[chaosTag(run, i)] = 1
		}
	}
	waitForValue(t, 30*time.Second, fmt.Sprintf("each present pod to run exactly once: want copies per tag %v", want),
		func() map[string]int { return workloads(run) },
		func(counts map[string]int) bool { return maps.Equal(counts, want) })
	// Everything removed: no workload and no shim is left behind.
	for i := 0; i < chaosPods; i++ {
		if present[i] {
			d.remove(fmt.Sprintf("chaos-%d.yaml", i))
		}
	}
	waitForValue(t, 15*time.Second, "no workload and no shim left after every pod was removed",
		func() string { return chaosLeftovers(run, d) },
		func(left string) bool { return left == "" })
	stopObserver()
	scans := <-observed
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("duplicates observed (seed %d): %v", seed, violations[:min(len(violations), 10)])
	}
	t.Logf("%d operations %v, %d observer scans, no duplicate and no orphan", total, ops, scans)
}

// chaosLeftovers lists the run's workloads and the daemon's shims still
// alive, one ps line each; empty when nothing is left.
func chaosLeftovers(run string, d *daemon) string {
	if len(workloads(run)) == 0 && countShims(d.t, d) == 0 {
		return ""
	}
	out, _ := exec.Command("ps", "-eo", "pid,ppid,stat,args").Output()
	var left []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, run) || strings.Contains(line, "podvisor-shim "+d.data) {
			left = append(left, line)
		}
	}
	return "\n" + strings.Join(left, "\n")
}
