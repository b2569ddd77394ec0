package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
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
		counts[args[3]]++
	}
	return counts
}

func TestChaosAtMostOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos test runs in the full suite (make test)")
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
			for tag, n := range workloads() {
				if n > 1 {
					mu.Lock()
					violations = append(violations, fmt.Sprintf("%d copies of %s", n, tag))
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
	waitFor(t, func() bool { return len(workloads()) == 0 && countShims(t, d) == 0 })
	close(stop)
	scans := <-observed
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("duplicates observed (seed %d): %v", seed, violations[:min(len(violations), 10)])
	}
	t.Logf("%d operations %v, %d observer scans, no duplicate and no orphan", total, ops, scans)
}
