package throttle

import "time"

// Retry calls try until it succeeds or done is closed: at once, then
// after first, the wait doubling up to max. after is the clock
// (time.After; tests pass a fake one). It reports whether try succeeded.
// For what a broker refuses now and may grant later (NATS answers a
// SUBSCRIBE whose JetStream consumer it could not create in time with
// the same SUBACK 0x80 as an ACL's refusal): trying again costs one
// packet per max, and gives back what a broker's busy moment took.
func Retry(done <-chan struct{}, first, max time.Duration, after func(time.Duration) <-chan time.Time, try func() bool) bool {
	wait := first
	for !try() {
		select {
		case <-done:
			return false
		case <-after(wait):
		}
		wait = min(2*wait, max)
	}
	return true
}
