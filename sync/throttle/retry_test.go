package throttle

import (
	"testing"
	"time"
)

// Retry tries at once, then after waits that double up to max, until a
// try succeeds; a closed done ends it between tries.
func TestRetryBacksOffUntilATrySucceeds(t *testing.T) {
	var waits []time.Duration
	after := func(d time.Duration) <-chan time.Time {
		waits = append(waits, d)
		c := make(chan time.Time, 1)
		c <- time.Time{}
		return c
	}
	tries := 0
	if !Retry(nil, time.Second, 5*time.Second, after, func() bool { tries++; return tries == 6 }) {
		t.Fatal("Retry reported failure after a try succeeded")
	}
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	if tries != 6 || len(waits) != len(want) {
		t.Fatalf("tries %d, waits %v; want 6 tries and waits %v", tries, waits, want)
	}
	for i := range want {
		if waits[i] != want[i] {
			t.Fatalf("waits %v, want %v", waits, want)
		}
	}

	done := make(chan struct{})
	close(done)
	never := func(time.Duration) <-chan time.Time { return nil }
	tries = 0
	if Retry(done, time.Second, time.Second, never, func() bool { tries++; return false }) || tries != 1 {
		t.Fatalf("after done: succeeded or tried %d times, want one failed try", tries)
	}
}
