package supervisor

import (
	"testing"
	"time"

	"github.com/podvisor/podvisor/config"
)

// Each part of the daemon reads its section of the config file: every
// setting the file gives, and the default of each it leaves out.
func TestEachPartReadsItsSection(t *testing.T) {
	c, err := config.Parse([]byte(`backoff: {initial: 2s, max: 20s}
eviction: {hard: {memory.available: 50Mi}, monitorPeriod: 1s}
shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 7}]
security: {forbidPrivileged: true, allowedHostPaths: [/srv]}
hub: {podSecurity: restricted, podSecurityVersion: v1.30, allowProcessPods: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	lc, ev, node, buckets := coreConfig(c), evictionConfig(c), nodeConfig(c, "v9"), ShutdownBuckets(c)
	policy, err := devicePolicy(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		got, want any
	}{
		{"BackoffInitial", lc.BackoffInitial, 2 * time.Second},
		{"BackoffMax", lc.BackoffMax, 20 * time.Second},
		{"BackoffReset", lc.BackoffReset, 10 * time.Minute},
		{"MinGracePeriod", lc.MinGracePeriod, 2 * time.Second},
		{"SaveDelay", lc.SaveDelay, 100 * time.Millisecond},
		{"MaxPods", node.MaxPods, int64(110)},
		{"Node.Version", node.Version, "v9"},
		{"Node.EvictionHard", len(node.EvictionHard), 1},
		{"Eviction.Hard", ev.Hard["memory.available"], "50Mi"},
		{"Eviction.MonitorPeriod", ev.MonitorPeriod, time.Second},
		{"Eviction.PressureTransitionPeriod", ev.PressureTransitionPeriod, 5 * time.Minute},
		{"ShutdownBuckets", len(buckets), 1},
		{"ShutdownBuckets[0]", buckets[0].GracePeriod, 7 * time.Second},
		{"ShutdownTime", ShutdownTime(c), 7 * time.Second},
		{"ForbidPrivileged", policy.ForbidPrivileged, true},
		{"AllowedHostPaths", len(policy.AllowedHostPaths), 1},
		{"Policy.Hub", policy.Hub.Level(), "restricted:v1.30"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	// Without a file: the kubelet's thresholds and shutdown order.
	d := config.Default()
	if ev := evictionConfig(d); len(ev.Hard) != 4 {
		t.Errorf("default hard thresholds %v, want the kubelet's four", ev.Hard)
	}
	if got := ShutdownTime(d); got != 30*time.Second {
		t.Errorf("default shutdown time %s, want 30s (20s, then 10s for critical pods)", got)
	}
}
