package e2e

import (
	"context"
	"fmt"
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

func chaosTag(i int) string { return fmt.Sprintf("77770%d", i) }

func chaosManifest(i, version int) string {
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
`, i, version, chaosTag(i))
}

// workloads counts live (non-zombie) processes per chaos tag.
func workloads() map[string]int {
	counts := map[string]int{}
	for tag, owners := range workloadOwners() {
		counts[tag] = len(owners)
	}
	return counts
}

// workloadOwners lists, per chaos tag, each live copy's pid and the
// instance its parent shim runs, to say which instances overlapped. A
// shell forking to run a command has a child with its own command line
// until the exec: such a child of a copy is part of that copy, not a
// second one.
func workloadOwners() map[string][]string {
	type proc struct{ tag, ppid, owner string }
	copies := map[string]proc{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		args := strings.Split(strings.TrimSuffix(string(data), "\x00"), "\x00")
		if err != nil || len(args) != 4 || args[0] != "sh" || !strings.HasPrefix(args[3], "77770") {
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
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 42))
	t.Logf("seed %d", seed)

	// The observer: any moment with two copies of a pod is a failure.
	var mu sync.Mutex
	var violations []string
	stop := make(chan struct{})
	observed := make(chan int)
	go func() {
		scans := 0
		for {
			select {
			case <-stop:
				observed <- scans
				return
			default:
			}
			for tag, owners := range workloadOwners() {
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
			d.write(fmt.Sprintf("chaos-%d.yaml", i), chaosManifest(i, version[i]))
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
	waitFor(t, func() bool {
		counts := workloads()
		for i := 0; i < chaosPods; i++ {
			want := 0
			if present[i] {
				want = 1
			}
			if counts[chaosTag(i)] != want {
				return false
			}
		}
		return true
	})
	// Everything removed: no workload and no shim is left behind.
	for i := 0; i < chaosPods; i++ {
		if present[i] {
			d.remove(fmt.Sprintf("chaos-%d.yaml", i))
		}
	}
	deadline := time.Now().Add(15 * time.Second)
	for len(workloads()) > 0 || countShims(t, d) > 0 {
		if time.Now().After(deadline) {
			out, _ := exec.Command("ps", "-eo", "pid,ppid,stat,args").Output()
			var left []string
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, "77770") || strings.Contains(line, "podvisor-shim") {
					left = append(left, line)
				}
			}
			t.Fatalf("left behind after every pod was removed:\n%s", strings.Join(left, "\n"))
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	scans := <-observed
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("duplicates observed (seed %d): %v", seed, violations[:min(len(violations), 10)])
	}
	t.Logf("%d operations %v, %d observer scans, no duplicate and no orphan", total, ops, scans)
}
