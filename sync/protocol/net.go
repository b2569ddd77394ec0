package protocol

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// MaxNetPods is how many pods a heartbeat's network summary names: the
// busiest, so a device with many pods sends a bounded summary.
const MaxNetPods = 10

// maxNetCounted bounds NetSummary.Counted: far above any device's max
// pods, far below anything that could overflow a sum.
const maxNetCounted = 1 << 16

// NetSources are the counter sources a device may report.
var NetSources = []string{"ebpf-cgroup-skb", "veth"}

// NetSummary is a device's pod network traffic, in its heartbeat when the
// device counts any: the total over every counted pod and the MaxNetPods
// busiest pods (received plus sent bytes), busiest first. Counters count
// since the device began counting each pod; a restarted daemon's eBPF
// counters start again from zero.
type NetSummary struct {
	// Counted is how many pods Total adds up (Pods names at most
	// MaxNetPods of them).
	Counted int         `json:"counted"`
	Total   NetCounters `json:"total"`
	Pods    []PodNet    `json:"pods,omitempty"`
}

// NetCounters are bytes and packets received (Rx) and sent (Tx).
type NetCounters struct {
	RxBytes   uint64 `json:"rxBytes"`
	RxPackets uint64 `json:"rxPackets"`
	TxBytes   uint64 `json:"txBytes"`
	TxPackets uint64 `json:"txPackets"`
}

// PodNet is one pod's counters.
type PodNet struct {
	Key    string `json:"key"`    // namespace/name
	Source string `json:"source"` // one of NetSources
	NetCounters
}

// atMost reports whether every counter of c is at most o's.
func (c NetCounters) atMost(o NetCounters) bool {
	return c.RxBytes <= o.RxBytes && c.RxPackets <= o.RxPackets && c.TxBytes <= o.TxBytes && c.TxPackets <= o.TxPackets
}

// Validate checks a summary from a device, untrusted: bounded counts,
// well-formed and distinct pod keys, known sources, and no pod above the
// total.
func (s *NetSummary) Validate() error {
	if s.Counted < 0 || s.Counted > maxNetCounted {
		return fmt.Errorf("net.counted %d: want 0 to %d", s.Counted, maxNetCounted)
	}
	if len(s.Pods) > MaxNetPods || len(s.Pods) > s.Counted {
		return fmt.Errorf("net.pods: %d pods, want at most %d and at most net.counted (%d)", len(s.Pods), MaxNetPods, s.Counted)
	}
	seen := map[string]bool{}
	for i, p := range s.Pods {
		ns, name, ok := strings.Cut(p.Key, "/")
		if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
			return fmt.Errorf("net.pods[%d].key %.300q: want namespace/name", i, p.Key)
		}
		if seen[p.Key] {
			return fmt.Errorf("net.pods[%d].key %q: named twice", i, p.Key)
		}
		seen[p.Key] = true
		known := false
		for _, src := range NetSources {
			known = known || p.Source == src
		}
		if !known {
			return fmt.Errorf("net.pods[%d].source %.64q: want one of %v", i, p.Source, NetSources)
		}
		if !p.NetCounters.atMost(s.Total) {
			return fmt.Errorf("net.pods[%d] (%s): counters above net.total", i, p.Key)
		}
	}
	return nil
}
