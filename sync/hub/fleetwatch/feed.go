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
	"time"
)

// What is a set of things of a device that changed.
type What uint8

const (
	Node      What = 1 << iota // heartbeat, presence, labels, cordon, taints, update state
	Pods                       // mirror pod statuses (a status batch)
	Events                     // the device's or its pods' events
	Workloads                  // the hub's workloads, their pods or placements (Device "")
	// Everything: anything of any device may have changed (Device ""),
	// as after this replica lost the other replicas' changes for a
	// while: readers re-read all they show.
	Everything

	// The signals: what one replica asks of the others rather than a
	// change readers show (Signal, OnSignal). They travel between
	// replicas only, never to a subscriber.

	// SchedulePass: a replica that does not lead was asked for a
	// scheduling pass (an apply, an eviction, a device's report); the
	// leader runs it.
	SchedulePass
	// UpdatePass: the same for a pass of the updates' controllers.
	UpdatePass
	// Objects: what the object links keep changed: a device's desired
	// pods or object index, stored by another replica (Device: the
	// device), or the hub's ConfigMaps or Secrets (Device ""). Each
	// replica's link reads it again.
	Objects
)

const (
	// all is every bit a change may carry.
	all = Node | Pods | Events | Workloads | Everything | signals
	// signals are the bits that are signals.
	signals = SchedulePass | UpdatePass | Objects
	// Missed is what a replica that lost the others' notes for a while
	// (its LISTEN connection) assumes it missed: everything, the passes
	// they asked for included.
	Missed = Everything | signals
)

// Change is what changed of one device ("" for the fleet as a whole).
type Change struct {
	Device string
	What   What
}

// heard is a device's newest report time (a heartbeat's, a presence's),
// which only the silence watch reads.
type heard struct {
	device string
	at     time.Time
}

// Feed fans changes out to its subscribers. The zero Feed is ready; a nil
// *Feed takes publications and drops them.
type Feed struct {
	mu   sync.Mutex
	subs map[*Sub]struct{}
	seq  uint64
	// heard goes to the silence watch (WatchSilence), when it runs.
	heard chan heard
	// relay, when set (SetRelay), takes what Publish publishes on to the
	// other replicas.
	relay func(Note)
	// onSignal, when set (OnSignal), hears the signals of the others.
	onSignal func(device string, what What)
	// now is this replica's clock (time.Now when nil; tests set it).
	now func() time.Time
}

// clock is this replica's time now.
func (f *Feed) clock() time.Time {
	if f.now != nil {
		return f.now()
	}
	return time.Now()
}

// Publish tells every subscriber of a change, and the other replicas'
// feeds through the relay (SetRelay), if there is one: what a writer
// outside the fleet store publishes (a scheduling pass, a silence). It
// never blocks.
func (f *Feed) Publish(device string, what What) {
	if f == nil || what == 0 {
		return
	}
	f.mu.Lock()
	relay := f.relay
	f.mu.Unlock()
	f.Deliver(device, what)
	if relay != nil {
		relay(Note{Device: device, What: what})
	}
}

// Deliver tells this replica's subscribers of a change, and no other
// replica: the fleet store's own writes, which told the others in their
// transaction, and what was heard from the others. It never blocks.
// Signals are not changes: they are left out.
func (f *Feed) Deliver(device string, what What) {
	what &^= signals
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

// SetRelay makes Publish hand every change on to relay, which must not
// block (it queues): how the other replicas hear of this one's writes
// made outside the fleet store. nil turns relaying off.
func (f *Feed) SetRelay(relay func(Note)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.relay = relay
}

// Signal tells the other replicas (the relay: SetRelay) of signals of
// the fleet (SchedulePass, UpdatePass, Objects), and neither this replica's
// subscribers nor its own OnSignal: a replica never answers its own
// signal, so a leader's pass, which publishes Workloads, asks for no
// other. Without a relay (one replica) there is nobody to tell. It
// never blocks.
func (f *Feed) Signal(what What) {
	what &= signals
	if f == nil || what == 0 {
		return
	}
	f.mu.Lock()
	relay := f.relay
	f.mu.Unlock()
	if relay != nil {
		relay(Note{What: what})
	}
}

// OnSignal has fn told of the signals heard from other replicas
// (Receive), per device ("" for the fleet) and coalesced per
// notification; fn must not block. nil stops it.
func (f *Feed) OnSignal(fn func(device string, what What)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onSignal = fn
}

// Heard delivers a Node change of a device heard from at a time (its
// heartbeat or presence, stored here or by another replica), which the
// silence watch counts its timeout from. Like Deliver, it tells no other
// replica.
func (f *Feed) Heard(device string, at time.Time) {
	if f == nil {
		return
	}
	f.Deliver(device, Node)
	f.mu.Lock()
	ch := f.heard
	f.mu.Unlock()
	if ch != nil {
		select {
		case ch <- heard{device, at}:
		default: // a full queue: the watch's safety net re-arms it
		}
	}
}

// WatchSilence publishes a Node change of each device that goes silent:
// timeout after it was last heard from (Heard) with nothing newer, when
// the hub's readers would see it turn NotReady though nothing was
// written. It runs until ctx ends.
func (f *Feed) WatchSilence(ctx context.Context, timeout time.Duration) {
	ch := make(chan heard, 1024)
	f.mu.Lock()
	f.heard = ch
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.heard = nil
		f.mu.Unlock()
	}()
	deadlines := map[string]time.Time{}
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		next := time.Time{}
		for _, at := range deadlines {
			if next.IsZero() || at.Before(next) {
				next = at
			}
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0) + silenceMargin
		}
		t.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case h := <-ch:
			if at := h.at.Add(timeout); at.After(deadlines[h.device]) {
				deadlines[h.device] = at
			}
		case now := <-t.C:
			for d, at := range deadlines {
				if !now.Before(at) {
					delete(deadlines, d)
					f.Publish(d, Node)
				}
			}
		}
	}
}

// silenceMargin puts a silence's publication past its deadline, so that
// readers judging readiness with their own clock see the device stale.
const silenceMargin = 50 * time.Millisecond

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
