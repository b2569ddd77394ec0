package uplink

import (
	"math/rand/v2"
	"sync"
	"time"
)

// sessionBeatWithin bounds the delay of a heartbeat answering a hub
// session's announcement: a replica that gained devices announces a new
// session and has no heartbeat of them until their next one (a period
// later); each device answers within this, at a random instant, so that
// a fleet does not answer at once.
const sessionBeatWithin = 2 * time.Second

// sessionBeat schedules the heartbeat that answers an announcement:
// one at a time (announcements that come while one is due share it).
type sessionBeat struct {
	within time.Duration
	// jitter is a delay in [0, n) (rand.N); after runs f after d
	// (time.AfterFunc). Tests set their own.
	jitter func(n time.Duration) time.Duration
	after  func(d time.Duration, f func())

	mu  sync.Mutex
	due bool
}

func newSessionBeat() *sessionBeat {
	return &sessionBeat{within: sessionBeatWithin, jitter: rand.N[time.Duration],
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) }}
}

// announced has beat run within the bound, unless one is due already;
// it returns the delay chosen (false: one was due).
func (s *sessionBeat) announced(beat func()) (time.Duration, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.due {
		return 0, false
	}
	s.due = true
	d := s.jitter(s.within)
	s.after(d, func() {
		s.mu.Lock()
		s.due = false
		s.mu.Unlock()
		beat()
	})
	return d, true
}
