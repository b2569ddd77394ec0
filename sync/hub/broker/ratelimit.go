package broker

import "time"

// tokenBucket allows a sustained rate with bursts. It is told the time,
// so tests need no clock. A zero rate allows everything.
type tokenBucket struct {
	rate, burst float64 // per second; the most saved up
	tokens      float64
	last        time.Time
}

func newBucket(rate, burst float64, now time.Time) *tokenBucket {
	return &tokenBucket{rate: rate, burst: burst, tokens: burst, last: now}
}

// allow takes cost tokens if there are that many. A clock that steps
// back adds nothing.
func (b *tokenBucket) allow(now time.Time, cost float64) bool {
	if b.rate <= 0 {
		return true
	}
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens = min(b.burst, b.tokens+dt*b.rate)
	}
	b.last = now
	if b.tokens < cost {
		return false
	}
	b.tokens -= cost
	return true
}
