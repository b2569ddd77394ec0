package throttle

import (
	"testing"
	"time"
)

func TestFirstOfEachIntervalThenOneSummary(t *testing.T) {
	now := time.Unix(1000, 0)
	c := New(3, time.Minute, func() time.Time { return now })
	logged := 0
	for range 1000 {
		if log, sum := c.Note(); log {
			logged++
		} else if sum != 0 {
			t.Fatalf("a summary inside the interval: %d", sum)
		}
	}
	if logged != 3 || c.Total() != 1000 {
		t.Fatalf("logged %d of %d, want 3", logged, c.Total())
	}
	if n := c.Flush(); n != 0 {
		t.Fatalf("flushed %d before the interval ended", n)
	}
	now = now.Add(time.Minute)
	if n := c.Flush(); n != 997 {
		t.Fatalf("summary %d, want 997", n)
	}
	log, sum := c.Note()
	if !log || sum != 0 {
		t.Fatalf("first of the next interval: log %v summary %d", log, sum)
	}
	for range 5 {
		c.Note()
	}
	now = now.Add(2 * time.Minute)
	if log, sum := c.Note(); !log || sum != 3 {
		t.Fatalf("next interval reports the last one's count: log %v summary %d, want 3", log, sum)
	}
	// A clock stepped back starts a new interval rather than muting forever.
	for range 10 {
		c.Note()
	}
	now = now.Add(-time.Hour)
	if log, sum := c.Note(); !log || sum != 8 {
		t.Fatalf("after a step back: log %v summary %d", log, sum)
	}
}
