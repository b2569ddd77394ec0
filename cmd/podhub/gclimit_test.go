package main

import (
	"testing"
	"time"
)

func TestParseMemoryLimit(t *testing.T) {
	for in, want := range map[string]memoryLimit{
		"": {auto: true}, "auto": {auto: true}, "off": {}, "0": {},
		"512Mi": {bytes: 512 << 20}, "1G": {bytes: 1e9},
	} {
		if got, err := parseMemoryLimit(in); err != nil || got != want {
			t.Errorf("parseMemoryLimit(%q) = %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"-1Gi", "1Mi", "lots", "12 cores"} {
		if got, err := parseMemoryLimit(bad); err == nil {
			t.Errorf("parseMemoryLimit(%q) = %+v, want an error", bad, got)
		}
	}
}

// The auto limit gives each connected device its budget, and never sits
// below what is live (the collector would then run without end).
func TestAutoLimit(t *testing.T) {
	if got := autoLimit(0, 8<<20); got != autoBase {
		t.Errorf("no devices, 8 MiB live: %d, want the base %d", got, autoBase)
	}
	if got, want := autoLimit(3000, 70<<20), int64(autoBase+3000*autoPerDevice); got != want {
		t.Errorf("3,000 devices, 70 MiB live: %d, want %d", got, want)
	}
	if got, want := autoLimit(1000, 400<<20), int64(400<<20)/8*9; got != want {
		t.Errorf("1,000 devices, 400 MiB live (a heavier fleet than the budget): %d, want 9/8 of live %d", got, want)
	}
	if live, allocated := memStats(); live == 0 || allocated == 0 {
		t.Errorf("memStats read %d live, %d allocated", live, allocated)
	}
}

// A burst of allocation lends headroom until burstHold after its last
// busy period; an idle trickle does not start one.
func TestBurstHeadroom(t *testing.T) {
	var b burst
	t0 := time.Unix(1700000000, 0)
	steps := []struct {
		after     time.Duration
		allocated uint64
		want      int64
	}{
		{0, 10 << 20, burstHeadroom}, // the first reading counts from 0
		{autoEvery, 10<<20 + 1000, burstHeadroom},
		{burstHold + time.Millisecond, 10<<20 + 2000, 0},
		{burstHold + 2*autoEvery, 10<<20 + 2000 + burstAlloc, burstHeadroom},
		{2*burstHold + 3*autoEvery, 10<<20 + 3000 + burstAlloc, 0},
	}
	for i, s := range steps {
		if got := b.headroom(s.allocated, t0.Add(s.after)); got != s.want {
			t.Errorf("step %d: headroom %d, want %d", i, got, s.want)
		}
	}
}
