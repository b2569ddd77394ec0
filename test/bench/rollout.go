package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// The rolling update benchmark's knobs.
var (
	rolloutDevices    = flag.Int("rollout-devices", 0, "simulated devices for the DaemonSet rolling update measurement (0: skip)")
	rolloutOnly       = flag.Bool("rollout-only", false, "measure only the DaemonSet rolling update with -rollout-devices simulated devices")
	rolloutReadyAfter = flag.Duration("rollout-ready-after", 2*time.Second, "how long a simulated device's new pod takes to become Ready")
)

// rolloutMaxUnavailable is the DaemonSet's budget, as a percentage of
// the devices.
const rolloutMaxUnavailable = 10

// rolloutManifest is the DaemonSet at a version: only the argument
// changes, so a new version is a new template (a new revision).
func rolloutManifest(version int) string {
	return workloadfile.DaemonSet("agent",
		fmt.Sprintf(`containers: [{name: c, image: "process:///bin/sleep", args: ["%d"], resources: {requests: {cpu: 10m, memory: 8Mi}}}]`, 1000+version)) +
		fmt.Sprintf("  updateStrategy: {type: RollingUpdate, rollingUpdate: {maxUnavailable: \"%d%%\"}}\n", rolloutMaxUnavailable)
}

// rolloutBench rolls a DaemonSet over n simulated devices from one
// template to the next. Each device runs real agents (TLS, its own
// store, signed documents) and reports its pod Running and Ready
// readyAfter after it applied it, as a pod with a readiness probe does.
// It measures the wall time from the apply until every device reports
// the new template's pod Ready, podhub's CPU and memory over it, and the
// most devices without a Ready pod at once — which the budget bounds.
func rolloutBench(bin string, n int, readyAfter time.Duration) error {
	if n <= 0 {
		return nil
	}
	ph, dir, podhub, done, err := fleetHub(bin, "podvisor-rolloutbench")
	if err != nil {
		return err
	}
	defer done()
	client, data := ph.client, ph.data
	fmt.Printf("\nDaemonSet rolling update: podhub with %d simulated devices, maxUnavailable %d%%, pods Ready %s after they start (%s, %d CPUs)\n",
		n, rolloutMaxUnavailable, readyAfter, cpuModel(), runtime.NumCPU())
	if err := enrolSimDevices(client, n); err != nil {
		return err
	}
	avail := newAvailability()
	stopChildren, err := simChildren(ph, n, dir, readyAfter.String(), avail.read)
	if err != nil {
		return err
	}
	defer stopChildren()
	apply := func(version int) error {
		manifest := filepath.Join(dir, fmt.Sprintf("agent-%d.yaml", version))
		if err := os.WriteFile(manifest, []byte(rolloutManifest(version)), 0o644); err != nil {
			return err
		}
		if out, err := exec.Command(podhub, "--data-dir", data, "apply", "-f", manifest).CombinedOutput(); err != nil {
			return fmt.Errorf("podhub apply -f: %v %s", err, out)
		}
		return nil
	}
	if err := apply(1); err != nil {
		return err
	}
	first, err := avail.waitAll(n, "", 10*time.Minute)
	if err != nil {
		return fmt.Errorf("the first version: %w", err)
	}
	// The hub must have heard every pod Ready too: an old pod it still
	// believes not Ready is replaced first, outside the budget, as the
	// DaemonSet controller replaces unhealthy pods.
	for deadline := time.Now().Add(10 * time.Minute); ; time.Sleep(time.Second) {
		st, err := daemonSetStatus(client, "agent")
		if err == nil && st.NumberAvailable == int32(n) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 10 min the hub counts %d of %d devices available (%v)", st.NumberAvailable, n, err)
		}
	}
	avail.resetPeak()
	cpu0, _ := cpuTicks(ph.pid())
	start := time.Now()
	if err := apply(2); err != nil {
		return err
	}
	if _, err := avail.waitAll(n, first, 15*time.Minute); err != nil {
		return fmt.Errorf("the rolling update: %w (most devices unavailable at once: %d)", err, avail.peakUnavailable())
	}
	wall := time.Since(start)
	cpu1, _ := cpuTicks(ph.pid())
	mem := rss(ph.pid())
	peakRSS := procMiB(fmt.Sprintf("/proc/%d/status", ph.pid()))["VmHWM:"]
	budget := n * rolloutMaxUnavailable / 100
	peak := avail.peakUnavailable()
	verdict := "within the budget"
	if peak > budget {
		verdict = "OVER the budget"
	}
	fmt.Printf("  apply -> every device runs the new template, Ready     %8.2f s\n", wall.Seconds())
	fmt.Printf("  podhub CPU over the rollout                            %8.2f s\n", float64(cpu1-cpu0)/clockTicks)
	fmt.Printf("  podhub RSS after / peak                                %6.1f / %.1f MiB\n", mem.total, peakRSS)
	fmt.Printf("  most devices without a Ready pod at once               %8d    (budget %d: %s)\n", peak, budget, verdict)
	if peak > budget {
		return fmt.Errorf("the rolling update took %d devices down at once, over maxUnavailable %d", peak, budget)
	}
	return nil
}

// availability is every simulated device's state as its child reports
// it: "DEVICE HASH" when the DaemonSet's pod of that template hash is
// Ready there, "DEVICE -" when none is. It keeps the most devices
// unavailable at once.
type availability struct {
	mu          sync.Mutex
	changed     *sync.Cond
	ready       map[string]string // device -> hash of its Ready pod, "" for none
	unavailable int               // devices seen once, without a Ready pod now
	peak        int
}

func newAvailability() *availability {
	a := &availability{ready: map[string]string{}}
	a.changed = sync.NewCond(&a.mu)
	return a
}

func (a *availability) read(r io.Reader) {
	s := bufio.NewScanner(r)
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) != 2 {
			continue
		}
		hash := f[1]
		if hash == "-" {
			hash = ""
		}
		a.mu.Lock()
		before, seen := a.ready[f[0]]
		switch {
		case seen && before != "" && hash == "":
			a.unavailable++
		case seen && before == "" && hash != "":
			a.unavailable--
		}
		if seen || hash != "" {
			a.ready[f[0]] = hash
		}
		a.peak = max(a.peak, a.unavailable)
		a.changed.Broadcast()
		a.mu.Unlock()
	}
}

func (a *availability) resetPeak() {
	a.mu.Lock()
	a.peak = a.unavailable
	a.mu.Unlock()
}

func (a *availability) peakUnavailable() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.peak
}

// waitAll waits until all n devices report a Ready pod of a template
// other than old, and returns that template's hash.
func (a *availability) waitAll(n int, old string, timeout time.Duration) (string, error) {
	timer := time.AfterFunc(timeout, func() { a.mu.Lock(); a.changed.Broadcast(); a.mu.Unlock() })
	defer timer.Stop()
	deadline := time.Now().Add(timeout)
	a.mu.Lock()
	defer a.mu.Unlock()
	for {
		done, hash := 0, ""
		for _, h := range a.ready {
			if h != "" && h != old {
				done++
				hash = h
			}
		}
		if done == n {
			return hash, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("after %s, %d of %d devices report a Ready pod of the new template", timeout, done, n)
		}
		a.changed.Wait()
	}
}

// showAvailability prints a device's DaemonSet pod's availability when
// it changes: the template hash of its Ready pod, or "-" for none.
func showAvailability(report *lineWriter) func(id string, running map[string]*v1.Pod, ready map[string]bool) {
	var mu sync.Mutex
	shown := map[string]string{}
	return func(id string, running map[string]*v1.Pod, ready map[string]bool) {
		state := "-"
		for key, p := range running {
			if ready[key] {
				state = p.Labels["controller-revision-hash"]
				break
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if old, ok := shown[id]; !ok || old != state {
			shown[id] = state
			report.line(id + " " + state)
		}
	}
}

// daemonSetStatus is a DaemonSet's status as the hub's API lists it.
func daemonSetStatus(client *api.Client, name string) (appsv1.DaemonSetStatus, error) {
	var items []json.RawMessage
	if err := client.Do("GET", "/v1/workloads/daemonsets", nil, &items); err != nil {
		return appsv1.DaemonSetStatus{}, err
	}
	for _, raw := range items {
		var ds appsv1.DaemonSet
		if json.Unmarshal(raw, &ds) == nil && ds.Name == name {
			return ds.Status, nil
		}
	}
	return appsv1.DaemonSetStatus{}, fmt.Errorf("no DaemonSet %q", name)
}
