package netcount

import "testing"

func TestSumAddsEveryCPU(t *testing.T) {
	got := sum([]Counters{{1, 2, 3, 4}, {10, 20, 30, 40}, {}})
	if want := (Counters{11, 22, 33, 44}); got != want {
		t.Fatalf("sum = %+v, want %+v", got, want)
	}
	if got := sum(nil); got != (Counters{}) {
		t.Fatalf("sum of nothing = %+v", got)
	}
}

// What the host side of a veth receives, the pod sent.
func TestHostSideIsMirrored(t *testing.T) {
	got := fromHostSide(100, 1, 2000, 20)
	if want := (Counters{RxBytes: 2000, RxPackets: 20, TxBytes: 100, TxPackets: 1}); got != want {
		t.Fatalf("fromHostSide = %+v, want %+v", got, want)
	}
}
