package listen

import (
	"testing"
	"time"
)

// The dumps after a start: 10 ms apart, doubling to 1 s, 1 s apart for
// the first 30 s, then 10 s apart; a new start begins it all again.
func TestNextDumpSchedule(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ms := time.Millisecond

	if got := NextDump(t0, at(-5*time.Second)); !got.Equal(t0) {
		t.Fatalf("not dumped since the start: due %v, want at the start", got.Sub(t0))
	}
	// Walk the schedule from the start: the clock is the due times.
	var dumps []time.Duration
	last := t0
	for last.Sub(t0) < 60*time.Second {
		dumps = append(dumps, last.Sub(t0))
		last = NextDump(t0, last)
	}
	want := []time.Duration{0, 10 * ms, 20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, 1280 * ms, 2280 * ms}
	for i, w := range want {
		if dumps[i] != w {
			t.Fatalf("dump %d at %v, want %v (schedule %v)", i, dumps[i], w, dumps[:len(want)])
		}
	}
	// Frequent for DumpBurstFor, then DumpSlow apart.
	var burst, slow int
	for i := 1; i < len(dumps); i++ {
		gap := dumps[i] - dumps[i-1]
		switch {
		case dumps[i-1] < DumpBurstFor && gap > DumpBurst:
			t.Fatalf("%v after the start the next dump waits %v, longer than %v", dumps[i-1], gap, DumpBurst)
		case dumps[i-1] >= DumpBurstFor && (gap > DumpSlow || !t0.Add(dumps[i]).Truncate(DumpSlow).Equal(t0.Add(dumps[i]))):
			t.Fatalf("%v after the start the next dump at %v: want at most %v later, on the %v grid", dumps[i-1], dumps[i], DumpSlow, DumpSlow)
		case dumps[i-1] < DumpBurstFor:
			burst++
		default:
			slow++
		}
	}
	if burst > 40 || slow < 2 || slow > 3 {
		t.Fatalf("%d dumps in the first 30 s (want at most 40), %d in the next 30 s (want 2 or 3, on the 10 s grid)", burst, slow)
	}
	// Two pods whose containers started apart are dumped together once
	// both are slow: the sweep that wakes for one serves the other.
	a, b := NextDump(t0, at(31*time.Second+7*ms)), NextDump(at(3*time.Second), at(36*time.Second+300*ms))
	if !a.Equal(b) {
		t.Fatalf("slow dumps of two pods at %v and %v, want the same grid time", a.Sub(t0), b.Sub(t0))
	}
	// A start long after: frequent again.
	restart := at(time.Hour)
	if got := NextDump(restart, at(time.Hour-time.Second)); !got.Equal(restart) {
		t.Fatalf("a new start: due %v, want at it", got.Sub(restart))
	}
	if got := NextDump(restart, restart); got.Sub(restart) != DumpFirst {
		t.Fatalf("dumped at the new start: next in %v, want %v", got.Sub(restart), DumpFirst)
	}
}
