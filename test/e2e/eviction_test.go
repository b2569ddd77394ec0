package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

func TestMemoryHogIsEvictedBeforeGuaranteedSuffers(t *testing.T) {
	requireRoot(t)
	obs := pressure.Observer{MemoryCgroup: cgroups.V1MemoryMount()}.Observe()[eviction.MemoryAvailable]
	if obs.Capacity == 0 {
		prerequisite(t, "cannot read memory.available")
	}
	// A threshold 400 MiB below what is available now: the hog's 800 MiB
	// crosses it, the machine is never really short of memory.
	threshold := obs.Available - 400<<20
	d := newDaemon(t)
	d.withConfig(fmt.Sprintf("eviction: {hard: {memory.available: \"%d\"}}\n", threshold))
	d.start()
	d.write("precious.yaml", `apiVersion: v1
kind: Pod
metadata: {name: precious}
spec:
  runtimeClassName: process
  containers:
  - name: app
    image: host
    command: ["sleep", "1000"]
    resources:
      limits: {cpu: 100m, memory: 64Mi}
`)
	d.waitPod("precious", 10*time.Second, running)
	hog := filepath.Join(filepath.Dir(binary), "hog")
	marks := filepath.Join(d.dir, "hog.log")
	d.write("hog.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 30
  containers:
  - name: app
    image: host
    command: [%q, "-mb", "800", "-threshold", "%d", "-log", %q]
`, hog, threshold, marks))
	p := d.waitPod("hog", 30*time.Second, func(p *v1.Pod) bool { return p.Status.Reason == "Evicted" })
	if p.Status.Phase != v1.PodFailed || !strings.Contains(p.Status.Message, "memory") {
		t.Fatalf("evicted pod: %s %q", describePod(p), p.Status.Message)
	}
	d.waitPod("hog", 10*time.Second, func(p *v1.Pod) bool { return p.Status.ContainerStatuses[0].State.Terminated != nil })
	pr := d.waitPod("precious", time.Second, running)
	if cs := pr.Status.ContainerStatuses[0]; cs.RestartCount != 0 || cs.LastTerminationState.Terminated != nil {
		t.Fatalf("the Guaranteed pod suffered: %+v", cs)
	}
	// The kernel's event, not the 10 s safety net, must have woken the
	// look that chose the hog: the daemon names what woke it on the victim.
	evs, err := d.client.Events(context.Background(), "default", "hog")
	if err != nil {
		t.Fatal(err)
	}
	var cause string
	for _, e := range evs {
		if e.Reason == "EvictionThresholdMet" {
			cause = e.Message
		}
	}
	_, woken, _ := strings.Cut(cause, "woken by the ")
	if !strings.Contains(woken, "memory threshold event") && !strings.Contains(woken, "PSI trigger") {
		t.Fatalf("the eviction was not woken by the kernel's memory events: EvictionThresholdMet %q (events %+v)", cause, evs)
	}
	// How fast is a figure, not a verdict: test/bench -evictions measures it.
	var cross, term int64
	lines := readLines(marks)
	for i := 0; i+1 < len(lines); i++ {
		switch lines[i] {
		case "cross":
			fmt.Sscan(lines[i+1], &cross)
		case "term":
			fmt.Sscan(lines[i+1], &term)
		}
	}
	if cross != 0 && term != 0 {
		t.Logf("memory threshold crossed -> SIGTERM in %v (%s)", time.Duration(term-cross), cause)
	}
	out, _, _ := d.cli("get", "pods")
	if !strings.Contains(out, "Evicted") {
		t.Fatalf("get pods:\n%s", out)
	}
}

func TestDiskPressureReclaimsLogsThenEvicts(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("logs: {maxSize: 4Ki, maxFiles: 3}\n")
	d.start()
	d.write("chatty.yaml", processPod("chatty", "Always", 2, "i=0; while [ $i -lt 400 ]; do echo line-$i-padding-padding-padding; i=$((i+1)); done; exec sleep 1000"))
	d.waitPod("chatty", 10*time.Second, running)
	waitFor(t, "chatty's log to be rotated", func() bool {
		rotated, _ := filepath.Glob(filepath.Join(d.data, "logs", "*", "*", "*.log.[0-9]*"))
		return len(rotated) > 0
	})
	// Done writing: a rotation after the reclaim would leave a rotated
	// log behind it.
	waitFor(t, "chatty to write its last line", func() bool {
		logs, _ := filepath.Glob(filepath.Join(d.data, "logs", "*", "*", "*.log*"))
		for _, f := range logs {
			if data, err := os.ReadFile(f); err == nil && strings.Contains(string(data), "line-399-") {
				return true
			}
		}
		return false
	})
	// The running pod is adopted by a daemon with a threshold no disk can
	// meet: DiskPressure from its first look.
	d.stop(syscall.SIGTERM)
	d.config = ""
	d.withConfig("eviction: {hard: {nodefs.available: \"99%\"}, monitorPeriod: 200ms}\nlogs: {maxSize: 4Ki, maxFiles: 3}\n")
	d.start()
	p := d.waitPod("chatty", 20*time.Second, func(p *v1.Pod) bool { return p.Status.Reason == "Evicted" })
	if !strings.Contains(p.Status.Message, "ephemeral-storage") {
		t.Fatalf("message = %q", p.Status.Message)
	}
	rotated, _ := filepath.Glob(filepath.Join(d.data, "logs", "*", "*", "*.log.[0-9]*"))
	if len(rotated) != 0 {
		t.Fatalf("rotated logs were not reclaimed: %v", rotated)
	}
	out, _, _ := d.cli("get", "node")
	if !strings.Contains(out, "DiskPressure") {
		t.Fatalf("get node:\n%s", out)
	}
	d.write("late.yaml", processPod("late", "Always", 2, "exec sleep 1000"))
	late := d.waitPod("late", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Reason != "" })
	if late.Status.Reason != "Evicted" || !strings.Contains(late.Status.Message, "DiskPressure") {
		t.Fatalf("admission under disk pressure: %s %q", describePod(late), late.Status.Message)
	}
}
