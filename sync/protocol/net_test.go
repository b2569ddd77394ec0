package protocol

import (
	"fmt"
	"strings"
	"testing"
)

func netHeartbeat(s *NetSummary) []byte {
	return Encode(&Heartbeat{Device: "gw-1", Version: "v1", Net: s})
}

func TestHeartbeatNetSummaryRoundTrip(t *testing.T) {
	s := &NetSummary{Counted: 3, Total: NetCounters{300, 3, 600, 6},
		Pods: []PodNet{{Key: "default/web", Source: "veth", NetCounters: NetCounters{200, 2, 400, 4}},
			{Key: "kube-system/agent", Source: "ebpf-cgroup-skb", NetCounters: NetCounters{100, 1, 200, 2}}}}
	h, err := DecodeHeartbeat(netHeartbeat(s))
	if err != nil {
		t.Fatal(err)
	}
	if h.Net == nil || h.Net.Counted != 3 || len(h.Net.Pods) != 2 || h.Net.Pods[0] != s.Pods[0] || h.Net.Total != s.Total {
		t.Fatalf("decoded %+v, want %+v", h.Net, s)
	}
	// Older devices send none: still a heartbeat.
	if h, err := DecodeHeartbeat(netHeartbeat(nil)); err != nil || h.Net != nil {
		t.Fatalf("heartbeat without net: %+v, %v", h, err)
	}
}

// A device's summary is untrusted: every bound is checked and the error
// names the field.
func TestHeartbeatNetSummaryAttacks(t *testing.T) {
	big := NetCounters{1 << 40, 1 << 30, 1 << 40, 1 << 30}
	pod := func(key string) PodNet { return PodNet{Key: key, Source: "veth", NetCounters: NetCounters{1, 1, 1, 1}} }
	many := &NetSummary{Counted: 100, Total: big}
	for i := range MaxNetPods + 1 {
		many.Pods = append(many.Pods, pod(fmt.Sprintf("default/p%d", i)))
	}
	for _, tc := range []struct {
		name string
		s    *NetSummary
		want string
	}{
		{"too many pods", many, "net.pods: 11 pods"},
		{"more pods than counted", &NetSummary{Counted: 1, Total: big, Pods: []PodNet{pod("a/b"), pod("a/c")}}, "net.pods: 2 pods"},
		{"negative count", &NetSummary{Counted: -1}, "net.counted -1"},
		{"huge count", &NetSummary{Counted: 1 << 30}, "net.counted"},
		{"key without namespace", &NetSummary{Counted: 1, Total: big, Pods: []PodNet{pod("web")}}, "net.pods[0].key"},
		{"key not a name", &NetSummary{Counted: 1, Total: big, Pods: []PodNet{pod("default/../x")}}, "net.pods[0].key"},
		{"huge key", &NetSummary{Counted: 1, Total: big, Pods: []PodNet{pod("default/" + strings.Repeat("a", 10000))}}, "net.pods[0].key"},
		{"duplicate key", &NetSummary{Counted: 2, Total: big, Pods: []PodNet{pod("a/b"), pod("a/b")}}, "named twice"},
		{"unknown source", &NetSummary{Counted: 1, Total: big, Pods: []PodNet{{Key: "a/b", Source: "guess"}}}, "net.pods[0].source"},
		{"pod above total", &NetSummary{Counted: 1, Total: NetCounters{}, Pods: []PodNet{pod("a/b")}}, "above net.total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeHeartbeat(netHeartbeat(tc.s))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
	// Negative or overflowing counters never decode.
	for _, raw := range []string{`{"schema":1,"device":"d","time":"2026-01-01T00:00:00Z","version":"v","node":{},"net":{"counted":0,"total":{"rxBytes":-1,"rxPackets":0,"txBytes":0,"txPackets":0}}}`,
		`{"schema":1,"device":"d","time":"2026-01-01T00:00:00Z","version":"v","node":{},"net":{"counted":0,"total":{"rxBytes":18446744073709551616,"rxPackets":0,"txBytes":0,"txPackets":0}}}`,
		`{"schema":1,"device":"d","time":"2026-01-01T00:00:00Z","version":"v","node":{},"net":{"counted":0,"total":{},"extra":1}}`} {
		if _, err := DecodeHeartbeat([]byte(raw)); err == nil {
			t.Errorf("decoded %s", raw)
		}
	}
}
