package gateway

import (
	"sync"
	"time"
)

// failures bounds failed logins per remote address: a token bucket of
// burst tries, one more every refill. An address with none left is
// answered 429 before its next guess is even looked at; a success does
// not refill it (a guesser with one valid token gains nothing).
type failures struct {
	burst  float64
	refill time.Duration
	max    int // addresses remembered; past it the fullest are forgotten

	mu   sync.Mutex
	byIP map[string]*bucket
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newFailures(burst int, refill time.Duration, max int) *failures {
	return &failures{burst: float64(burst), refill: refill, max: max, byIP: map[string]*bucket{}}
}

// level is the bucket's tries at now, refilled since its last change.
func (f *failures) level(b *bucket, now time.Time) float64 {
	n := b.tokens + float64(now.Sub(b.at))/float64(f.refill)
	if n > f.burst {
		n = f.burst
	}
	return n
}

// allowed reports whether addr may try a login now, and if not, how long
// until it may.
func (f *failures) allowed(addr string, now time.Time) (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.byIP[addr]
	if b == nil {
		return true, 0
	}
	n := f.level(b, now)
	if n >= 1 {
		return true, 0
	}
	return false, time.Duration((1 - n) * float64(f.refill))
}

// failed spends one of addr's tries.
func (f *failures) failed(addr string, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.byIP[addr]
	if b == nil {
		if len(f.byIP) >= f.max {
			f.forget(now)
		}
		b = &bucket{tokens: f.burst, at: now}
		f.byIP[addr] = b
	}
	b.tokens = f.level(b, now) - 1
	if b.tokens < 0 {
		b.tokens = 0
	}
	b.at = now
}

// forget drops the addresses whose buckets are full again (the same as
// never seen), and if that frees nothing, the one refilled the most.
func (f *failures) forget(now time.Time) {
	fullest, most := "", -1.0
	for ip, b := range f.byIP {
		n := f.level(b, now)
		if n >= f.burst {
			delete(f.byIP, ip)
		} else if n > most {
			fullest, most = ip, n
		}
	}
	if len(f.byIP) >= f.max && fullest != "" {
		delete(f.byIP, fullest)
	}
}

// slots bounds requests under way: a buffered channel of free places.
type slots chan struct{}

func newSlots(n int) slots { return make(slots, n) }

// take claims a place without waiting; false: all are taken.
func (s slots) take() bool {
	select {
	case s <- struct{}{}:
		return true
	default:
		return false
	}
}

func (s slots) give() { <-s }
