// Package throttle bounds what a flood of refused messages costs: the
// first few of each interval are logged (and kept as events) one by one,
// the rest only counted and reported in one summary line per interval.
package throttle

import (
	"sync"
	"time"
)

// Counter counts refusals of one kind. The zero value is not usable; make
// one with New. It is safe for concurrent use.
type Counter struct {
	first int
	every time.Duration
	now   func() time.Time

	mu         sync.Mutex
	start      time.Time // of the current interval
	inInterval int
	suppressed int64
	total      int64
}

// New counts refusals, letting the first of each interval through.
func New(first int, every time.Duration, now func() time.Time) *Counter {
	if now == nil {
		now = time.Now
	}
	return &Counter{first: first, every: every, now: now}
}

// Note counts one refusal. log says to report this one on its own;
// suppressed, when above 0, is how many were only counted in the interval
// that just ended, to report in one line.
func (c *Counter) Note() (log bool, suppressed int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total++
	suppressed = c.roll()
	if c.inInterval < c.first {
		c.inInterval++
		return true, suppressed
	}
	c.suppressed++
	return false, suppressed
}

// Flush returns the count suppressed in an interval that has ended, so a
// summary is reported even when the flood stops; call it periodically.
func (c *Counter) Flush() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.roll()
}

// roll starts a new interval when the current one is over, returning
// what the old one suppressed.
func (c *Counter) roll() int64 {
	now := c.now()
	if now.Sub(c.start) < c.every && !now.Before(c.start) {
		return 0
	}
	n := c.suppressed
	c.start, c.inInterval, c.suppressed = now, 0, 0
	return n
}

// Total is every refusal counted.
func (c *Counter) Total() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.total
}
