package uplink

import (
	"testing"
	"time"
)

func TestPacer(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	p := pacer{rate: 1000, tokens: 1000, last: t0}
	steps := []struct {
		at   time.Duration
		n    int
		wait time.Duration
	}{
		{0, 600, 0},                               // within the burst
		{0, 600, 200 * time.Millisecond},          // 200 over: 0.2 s at 1000/s
		{200 * time.Millisecond, 0, 0},            // paid back
		{time.Hour, 1500, 500 * time.Millisecond}, // saved up at most one second's worth
		{time.Hour + 500*time.Millisecond, 0, 0},  // paid back
		{time.Hour, 100, 100 * time.Millisecond},  // a clock stepping back adds nothing
	}
	for i, s := range steps {
		if got := p.take(t0.Add(s.at), s.n); got != s.wait {
			t.Errorf("step %d: wait %s, want %s", i, got, s.wait)
		}
	}
}

func TestPacerAllow(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	p := pacer{rate: 10, tokens: 10, last: t0}
	n := 0
	for p.allow(t0, 1) {
		n++
	}
	if n != 10 || p.allow(t0.Add(50*time.Millisecond), 1) || !p.allow(t0.Add(100*time.Millisecond), 1) {
		t.Fatalf("a burst of %d, then one per 100 ms: wrong", n)
	}
}
