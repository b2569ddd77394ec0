package main

import (
	"testing"

	"github.com/podvisor/podvisor/supervisor/api"
)

// A pod nothing counts shows "-", never 0; counted bytes show in
// MEMORY's unit.
func TestNetTotals(t *testing.T) {
	if in, out := netTotals(nil); in != "-" || out != "-" {
		t.Fatalf("uncounted pod: %q %q, want - -", in, out)
	}
	in, out := netTotals(&api.NetStats{Source: "veth", RxBytes: 8<<20 + 5, TxBytes: 1 << 10})
	if in != "8Mi" || out != "0Mi" {
		t.Fatalf("counted pod: %q %q, want 8Mi 0Mi", in, out)
	}
}
