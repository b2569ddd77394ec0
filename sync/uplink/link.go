package uplink

import "time"

// Link is the hub connection as the daemon's status line tells it.
type Link struct {
	Connected bool
	// Since is when the connection came or went, or when the first
	// attempt failed (zero: not connected yet, and no attempt failed).
	Since time.Time
}

// LinkSink is told each change of the link (part of
// supervisor.Assignments).
type LinkSink interface {
	HubLink(connected bool, since time.Time)
}

// linkState is the agent's Link and the channel closed at its next
// change; guarded by the agent's mu.
type linkState struct {
	Link
	changed chan struct{}
}

// setLinkLocked records the connection's state at now; a state that stays
// keeps its Since. Call with a.mu held.
func (a *Agent) setLinkLocked(connected bool) {
	if a.linkSt.changed == nil {
		a.linkSt.changed = make(chan struct{})
	}
	if connected == a.linkSt.Connected && !a.linkSt.Since.IsZero() {
		return
	}
	a.linkSt.Link = Link{Connected: connected, Since: a.now()}
	close(a.linkSt.changed)
	a.linkSt.changed = make(chan struct{})
}

// Connection returns the hub connection's state and a channel closed at
// its next change (link, in fetch.go, is the downloads' view).
func (a *Agent) Connection() (Link, <-chan struct{}) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.linkSt.changed == nil {
		a.linkSt.changed = make(chan struct{})
	}
	return a.linkSt.Link, a.linkSt.changed
}

// ReportLink tells sink the link's state, then each change, until done
// closes. Changes that come while sink takes the last one are coalesced.
func (a *Agent) ReportLink(sink LinkSink, done <-chan struct{}) {
	for {
		l, changed := a.Connection()
		sink.HubLink(l.Connected, l.Since)
		select {
		case <-done:
			return
		case <-changed:
		}
	}
}
