package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// countProcs counts the processes whose command line is exactly cmdline.
func countProcs(cmdline string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.TrimRight(strings.ReplaceAll(string(b), "\x00", " "), " ") == cmdline {
			n++
		}
	}
	return n
}

// Chaos: the daemon is killed with SIGKILL at random moments while
// generations of 8 hub pods arrive, and while its outbox drains after
// the broker was away. Afterwards every generation is applied whole, no
// pod runs twice, and the hub's mirrors match the device.
func TestHubChaosKills(t *testing.T) {
	r := newFleetRig(t)
	r.enrol(t, "chaos-1")
	d := newDaemon(t)
	d.withConfig(fmt.Sprintf("hub: {url: mqtt://%s, deviceId: chaos-1, key: %s, allowProcessPods: true, allowRootProcessPods: true}\n", r.addr, r.pubFile))
	d.start()
	const pods = 8
	script := func(gen, i int) string { return fmt.Sprintf("exec sleep %d", 30000+gen*100+i) }
	for gen := 1; gen <= 4; gen++ {
		var ms []string
		for i := range pods {
			ms = append(ms, processPod(fmt.Sprintf("c%d", i), "Always", 1, script(gen, i)))
		}
		r.apply(t, "chaos-1", ms...)
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond)
		d.stop(syscall.SIGKILL)
		d.start()
		waitForLong(t, 40*time.Second, fmt.Sprintf("generation %d applied", gen), func() bool {
			a, _ := r.fleet.LastAck("chaos-1")
			return a != nil && a.ObservedGeneration == int64(gen)
		})
		waitForLong(t, 40*time.Second, fmt.Sprintf("generation %d's pods running alone", gen), func() bool {
			for i := range pods {
				if countProcs("sleep "+fmt.Sprint(30000+gen*100+i)) != 1 {
					return false
				}
				for old := 1; old < gen; old++ {
					if countProcs("sleep "+fmt.Sprint(30000+old*100+i)) != 0 {
						return false
					}
				}
			}
			return true
		})
	}

	// The broker goes away while pods change; the daemon is killed as the
	// outbox starts to drain; the hub still ends with the device's view.
	r.broker.Close()
	d.write("crash.yaml", processPod("crash", "Always", 0, "exit 3"))
	d.waitPod("crash", 30*time.Second, func(p *v1.Pod) bool { return p.Status.ContainerStatuses[0].RestartCount >= 2 })
	r.restartBroker(t)
	time.Sleep(time.Duration(rand.IntN(200)) * time.Millisecond)
	d.stop(syscall.SIGKILL)
	d.start()
	waitForLong(t, 40*time.Second, "the hub's mirrors match the device", func() bool {
		out, _, _ := d.cli("get", "pods", "-o", "json")
		var local v1.PodList
		if err := json.Unmarshal([]byte(out), &local); err != nil {
			return false
		}
		for _, p := range local.Items {
			m := r.mirror("chaos-1", p.Namespace+"/"+p.Name)
			if m == nil || m.Status.Phase != p.Status.Phase || len(m.Status.ContainerStatuses) != len(p.Status.ContainerStatuses) {
				return false
			}
			for i, c := range p.Status.ContainerStatuses {
				if m.Status.ContainerStatuses[i].RestartCount != c.RestartCount {
					return false
				}
			}
		}
		return len(local.Items) == pods+1
	})
}
