package uplink

import (
	"math/rand/v2"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/lease"
)

// leaseLink is the agent's part in the self-fencing leases: it numbers
// heartbeats, keeps their send times (on the lease clock), and
// renews the daemon's leases at the send time of a heartbeat the hub
// answered — only once the connection's desired document is taken, so
// that a pod its lease stopped runs again only if the hub's current
// document still places it here.
type leaseLink struct {
	mu       sync.Mutex
	shortest time.Duration // the shortest lease of the hub pods (0: none)
	conn     uint64        // connections so far
	docConn  uint64        // the connection whose desired document was taken
	next     uint64        // the next heartbeat's number
	sent     map[uint64]time.Time
	answered time.Time // the newest send time the hub answered
	renewed  time.Time // the newest given to the daemon
	wake     chan struct{}
}

// maxBeatsKept bounds the send times kept for answers still to come.
const maxBeatsKept = 32

func (l *leaseLink) init() {
	l.next = rand.Uint64()>>1 | 1 // a receipt from another run never matches
	l.sent = map[uint64]time.Time{}
	l.wake = make(chan struct{}, 1)
}

// setPods notes the shortest lease among the pods in force; it reports
// whether it changed (the heartbeat period follows it).
func (l *leaseLink) setPods(pods []*v1.Pod) bool {
	var shortest time.Duration
	for _, p := range pods {
		if d, ok, err := lease.Of(p); ok && err == nil && (shortest == 0 || d < shortest) {
			shortest = d
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	changed := l.shortest != shortest
	l.shortest = shortest
	return changed
}

// period is the heartbeat period: every fourth of the shortest lease
// (at least a second) while a pod has one, so that a lost heartbeat or
// two does not let a lease run out while the link is up.
func (l *leaseLink) period(base time.Duration) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.shortest > 0 {
		return min(base, max(l.shortest/4, time.Second))
	}
	return base
}

// connected starts a connection: its document is yet to be taken.
func (l *leaseLink) connected() {
	l.mu.Lock()
	l.conn++
	l.mu.Unlock()
}

// beat numbers a heartbeat sent at now.
func (l *leaseLink) beat(now time.Time) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.next
	l.next++
	if l.next == 0 {
		l.next = 1
	}
	if len(l.sent) >= maxBeatsKept {
		oldest := n
		for k := range l.sent {
			if k < oldest {
				oldest = k
			}
		}
		delete(l.sent, oldest)
	}
	l.sent[n] = now
	return n
}

// answer takes the hub's receipt of heartbeat n; false when this run
// sent no heartbeat n (or its receipt came already).
func (l *leaseLink) answer(n uint64) bool {
	l.mu.Lock()
	at, ok := l.sent[n]
	if ok {
		delete(l.sent, n)
		if at.After(l.answered) {
			l.answered = at
		}
	}
	l.mu.Unlock()
	if ok {
		l.poke()
	}
	return ok
}

// current is the connection now (documents are tagged with it).
func (l *leaseLink) current() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.conn
}

// docTaken says a desired document received on connection conn is
// applied; one received on an earlier connection counts for nothing (it
// may be older than the one this connection brings).
func (l *leaseLink) docTaken(conn uint64) {
	l.mu.Lock()
	if conn == l.conn {
		l.docConn = conn
	}
	l.mu.Unlock()
	l.poke()
}

func (l *leaseLink) poke() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// due is the renewal to give the daemon, if any.
func (l *leaseLink) due() (time.Time, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.docConn != l.conn || l.answered.IsZero() || !l.answered.After(l.renewed) {
		return time.Time{}, false
	}
	l.renewed = l.answered
	return l.renewed, true
}

// renewals gives the daemon its lease renewals, off paho's reader (the
// daemon's loop may be busy).
func (a *Agent) renewals(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-a.lease.wake:
		}
		if at, ok := a.lease.due(); ok {
			a.pods.Renew(at)
		}
	}
}

// docTaken marks a document applied (p.conn: the connection it came on).
func (a *Agent) docTaken(p *pendingDoc) { a.lease.docTaken(p.conn) }
