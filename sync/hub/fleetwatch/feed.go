// Package fleetwatch tells the hub's readers (the Kubernetes API's
// watches, the dashboard's live page, the hub's metrics) what in the
// fleet changed, so that none of them polls the fleet database.
//
// A change names a device and what of it changed; a subscriber reads
// them coalesced (one entry per device), so a slow reader holds at most
// one entry per device however busy the fleet is, and never blocks the
// link that publishes.
package fleetwatch

import (
	"context"
	"sync"
)

// What is a set of things of a device that changed.
type What uint8

const (
	Node      What = 1 << iota // heartbeat, presence, labels, cordon, taints, update state
	Pods                       // mirror pod statuses (a status batch)
	Events                     // the device's or its pods' events
	Workloads                  // the hub's workloads, their pods or placements (Device "")
)

// Change is what changed of one device ("" for the fleet as a whole).
type Change struct {
	Device string
	What   What
}

// Feed fans changes out to its subscribers. The zero Feed is ready; a nil
// *Feed takes publications and drops them.
type Feed struct {
	mu   sync.Mutex
	subs map[*Sub]struct{}
	seq  uint64
}

// Publish tells every subscriber of a change. It never blocks.
func (f *Feed) Publish(device string, what What) {
	if f == nil || what == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	for s := range f.subs {
		s.add(device, what)
	}
}

// Seq counts the publications so far: a reader that saw Seq n and sees
// it again unchanged knows nothing was published in between.
func (f *Feed) Seq() uint64 {
	if f == nil {
		return 0
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq
}

// Subscribe starts a subscription; Close ends it.
func (f *Feed) Subscribe() *Sub {
	s := &Sub{feed: f, pending: map[string]What{}, ready: make(chan struct{}, 1)}
	if f == nil {
		return s
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = map[*Sub]struct{}{}
	}
	f.subs[s] = struct{}{}
	return s
}

// Sub is one reader's subscription.
type Sub struct {
	feed    *Feed
	mu      sync.Mutex
	pending map[string]What
	ready   chan struct{}
}

func (s *Sub) add(device string, what What) {
	s.mu.Lock()
	s.pending[device] |= what
	s.mu.Unlock()
	select {
	case s.ready <- struct{}{}:
	default:
	}
}

// Ready is signalled when changes are waiting (Take them).
func (s *Sub) Ready() <-chan struct{} { return s.ready }

// Take returns the changes waiting, one per device, and forgets them.
func (s *Sub) Take() []Change {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Change, 0, len(s.pending))
	for d, w := range s.pending {
		out = append(out, Change{Device: d, What: w})
	}
	clear(s.pending)
	return out
}

// Next waits for changes (or the context's end) and takes them.
func (s *Sub) Next(ctx context.Context) ([]Change, error) {
	for {
		if c := s.Take(); len(c) > 0 {
			return c, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.ready:
		}
	}
}

// Close ends the subscription.
func (s *Sub) Close() {
	if s.feed == nil {
		return
	}
	s.feed.mu.Lock()
	delete(s.feed.subs, s)
	s.feed.mu.Unlock()
}
