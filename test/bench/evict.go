package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

// evictionLatency measures, over rounds, the time from memory.available
// crossing the hard threshold to the victim's SIGTERM, both timestamped by
// the victim (test/hog), on a daemon whose threshold sits 300 MiB below
// what is available when it starts.
func evictionLatency(bin, dir string, rounds int) ([]time.Duration, error) {
	hog := filepath.Join(dir, "hog")
	if out, err := exec.Command("go", "build", "-o", hog, "./test/hog").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building the hog: %v: %s", err, out)
	}
	obs := pressure.Observer{MemoryCgroup: cgroups.V1MemoryMount()}.Observe()[eviction.MemoryAvailable]
	threshold := obs.Available - 300<<20
	cfg := filepath.Join(dir, "evict.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf("eviction: {hard: {memory.available: \"%d\"}, pressureTransitionPeriod: 1s}\ncgroups: {root: podvisor-bench-evict}\n", threshold)), 0o644)
	manifests := filepath.Join(dir, "evict-m")
	os.MkdirAll(manifests, 0o755)
	sock := filepath.Join(dir, "evict.sock")
	cmd := exec.Command(bin, "run", "--config", cfg, "--manifests", manifests, "--data-dir", filepath.Join(dir, "evict-data"),
		"--socket", sock, "--stop-pods-on-exit")
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	client := api.NewClient(sock)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := client.Version(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("eviction daemon did not start:\n%s", log.String())
		}
	}
	var out []time.Duration
	discarded := 0
	woken := map[string]int{} // what woke each eviction's check
	observer := pressure.Observer{MemoryCgroup: cgroups.V1MemoryMount()}
	for r := 0; r < rounds; r++ {
		// Start each round with memory well above the threshold, so that
		// only this round's hog crosses it.
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if o := observer.Observe()[eviction.MemoryAvailable]; o.Available > threshold+200<<20 {
				break
			}
		}
		marks := filepath.Join(dir, fmt.Sprintf("hog-%d.log", r))
		name := fmt.Sprintf("hog-%d", r)
		// A tiny memory request makes it Burstable, admitted even while
		// the previous round's MemoryPressure condition lingers.
		m := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  runtimeClassName: process\n  containers:\n  - name: hog\n    image: host\n    command: [%q, \"-mb\", \"600\", \"-step\", \"16\", \"-threshold\", \"%d\", \"-log\", %q]\n    resources: {requests: {memory: 1Mi}}\n",
			name, hog, threshold, marks)
		os.WriteFile(filepath.Join(manifests, name+".yaml"), []byte(m), 0o644)
		var cross, term int64
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && term == 0; time.Sleep(5 * time.Millisecond) {
			data, _ := os.ReadFile(marks)
			f := strings.Fields(string(data))
			for i := 0; i+1 < len(f); i++ {
				v, _ := strconv.ParseInt(f[i+1], 10, 64)
				switch f[i] {
				case "cross":
					cross = v
				case "term":
					term = v
				}
			}
		}
		woken[evictionCause(client, name)]++
		os.Remove(filepath.Join(manifests, name+".yaml"))
		switch {
		case term == 0:
			return nil, fmt.Errorf("round %d: the hog was never evicted:\n%s", r, log.String())
		case cross == 0:
			discarded++ // evicted before it saw its own crossing: no start time
			continue
		}
		out = append(out, time.Duration(term-cross))
	}
	if discarded > 0 {
		fmt.Printf("  (%d eviction rounds discarded: the victim was evicted before it observed the crossing itself)\n", discarded)
	}
	fmt.Printf("  (woken by: %v)\n", woken)
	if len(out) == 0 {
		return nil, fmt.Errorf("no eviction round could be timed")
	}
	return out, nil
}

// evictionCause is what woke the check that evicted the pod, from its
// EvictionThresholdMet event.
func evictionCause(client *api.Client, name string) string {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		evs, _ := client.Events(context.Background(), "default", name)
		for _, e := range evs {
			if _, woken, ok := strings.Cut(e.Message, "woken by the "); ok && e.Reason == "EvictionThresholdMet" {
				return woken
			}
		}
	}
	return "no EvictionThresholdMet event within 5 s"
}
