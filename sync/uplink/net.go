package uplink

import (
	"cmp"
	"slices"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/sync/protocol"
)

// podStats is the daemon's usage per pod, when the Pods given to New
// offer it (supervisor.Assignments does): the heartbeat's network summary
// comes from it.
type podStats interface {
	Stats() ([]api.PodStats, error)
}

// netSummary is the heartbeat's network summary, nil when the daemon
// counts no pod's traffic (no eBPF, no veth, no cgroups).
func (a *Agent) netSummary() *protocol.NetSummary {
	s, ok := a.pods.(podStats)
	if !ok {
		return nil
	}
	stats, err := s.Stats()
	if err != nil {
		return nil
	}
	return summarizeNet(stats, protocol.MaxNetPods)
}

// summarizeNet adds up every counted pod and keeps the top busiest
// (received plus sent bytes; ties by key, so the summary is stable).
func summarizeNet(stats []api.PodStats, top int) *protocol.NetSummary {
	var s protocol.NetSummary
	for _, p := range stats {
		if p.Net == nil {
			continue
		}
		c := protocol.NetCounters{RxBytes: p.Net.RxBytes, RxPackets: p.Net.RxPackets, TxBytes: p.Net.TxBytes, TxPackets: p.Net.TxPackets}
		s.Counted++
		s.Total = protocol.NetCounters{RxBytes: s.Total.RxBytes + c.RxBytes, RxPackets: s.Total.RxPackets + c.RxPackets,
			TxBytes: s.Total.TxBytes + c.TxBytes, TxPackets: s.Total.TxPackets + c.TxPackets}
		s.Pods = append(s.Pods, protocol.PodNet{Key: p.Namespace + "/" + p.Name, Source: p.Net.Source, NetCounters: c})
	}
	if s.Counted == 0 {
		return nil
	}
	slices.SortFunc(s.Pods, func(a, b protocol.PodNet) int {
		if c := cmp.Compare(b.RxBytes+b.TxBytes, a.RxBytes+a.TxBytes); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	if len(s.Pods) > top {
		s.Pods = s.Pods[:top]
	}
	return &s
}
