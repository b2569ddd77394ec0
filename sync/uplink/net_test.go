package uplink

import (
	"fmt"
	"testing"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/sync/protocol"
)

func TestSummarizeNetKeepsTheBusiestAndTheTotal(t *testing.T) {
	var stats []api.PodStats
	for i := range 15 {
		stats = append(stats, api.PodStats{Namespace: "default", Name: fmt.Sprintf("p%02d", i),
			Net: &api.NetStats{Source: "ebpf-cgroup-skb", RxBytes: uint64(i * 100), RxPackets: uint64(i), TxBytes: 10, TxPackets: 1}})
	}
	stats = append(stats, api.PodStats{Namespace: "default", Name: "uncounted"})
	s := summarizeNet(stats, protocol.MaxNetPods)
	if s == nil || s.Counted != 15 || len(s.Pods) != protocol.MaxNetPods {
		t.Fatalf("summary %+v: want 15 counted, %d named", s, protocol.MaxNetPods)
	}
	if s.Pods[0].Key != "default/p14" || s.Pods[9].Key != "default/p05" {
		t.Fatalf("pods not busiest first: %+v", s.Pods)
	}
	want := protocol.NetCounters{RxBytes: 100 * 105, RxPackets: 105, TxBytes: 150, TxPackets: 15}
	if s.Total != want {
		t.Fatalf("total %+v, want %+v", s.Total, want)
	}
	// What the device sends, the hub accepts.
	if _, err := protocol.DecodeHeartbeat(protocol.Encode(&protocol.Heartbeat{Device: "d", Net: s})); err != nil {
		t.Fatal(err)
	}
	if s := summarizeNet([]api.PodStats{{Namespace: "a", Name: "b"}}, 10); s != nil {
		t.Fatalf("no counted pod gives %+v, want none", s)
	}
}
