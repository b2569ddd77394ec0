package listen

import (
	"cmp"
	"slices"
	"time"
)

// maxListeners bounds what the tracker keeps per cgroup: a pod opening
// listeners by the thousand costs the daemon no more than this. Listeners
// past it go unreported, and their probes keep their periods.
const maxListeners = 1024

// socket is one listening socket as either path sees it.
type socket struct {
	NetNS  uint64
	Family uint16
	Port   uint16
	Cookie uint64
}

// tracker is the pure state both paths share: which sockets listen in
// each watched cgroup. It turns observations into transitions, so an
// event the eBPF program sends and a dump that sees the same socket are
// reported once.
//
// Dumps race with events: a dump reads the kernel at one moment and is
// applied later, after events that happened in between. Every change
// carries a generation; a dump started at generation g removes only
// sockets added at or before g, and does not bring back a socket whose
// close came after g (kept as a tombstone while a dump is under way).
type tracker struct {
	gen      uint64
	cgroups  map[uint64]map[uint64]tracked // cgroup → socket cookie → socket
	scanning int
	closed   map[uint64]uint64 // socket cookie → generation of its close
}

type tracked struct {
	socket
	gen    uint64
	dumped bool // learnt from a dump, not from an event
}

func newTracker() *tracker {
	return &tracker{cgroups: map[uint64]map[uint64]tracked{}, closed: map[uint64]uint64{}}
}

func (t *tracker) watch(cgroup uint64) {
	if t.cgroups[cgroup] == nil {
		t.cgroups[cgroup] = map[uint64]tracked{}
	}
}

func (t *tracker) unwatch(cgroup uint64) { delete(t.cgroups, cgroup) }

func (t *tracker) watching(cgroup uint64) bool { return t.cgroups[cgroup] != nil }

// observe applies one event of the eBPF program and returns it if it
// changed anything (events for unwatched cgroups and repeats are dropped).
func (t *tracker) observe(e Event) (Event, bool) {
	open := t.cgroups[e.Cgroup]
	if open == nil {
		return Event{}, false
	}
	t.gen++
	s := socket{NetNS: e.NetNS, Family: e.Family, Port: e.Port, Cookie: e.Socket}
	switch e.Kind {
	case Listening:
		delete(t.closed, s.Cookie)
		if _, ok := open[s.Cookie]; ok || len(open) >= maxListeners {
			return Event{}, false
		}
		open[s.Cookie] = tracked{socket: s, gen: t.gen}
		return e, true
	case Closed:
		if t.scanning > 0 {
			t.closed[s.Cookie] = t.gen
		}
		had, ok := open[s.Cookie]
		if !ok {
			return Event{}, false
		}
		delete(open, s.Cookie)
		// The close reports what the listen reported, whatever the
		// state callback saw of a half-torn-down socket.
		e.NetNS, e.Family, e.Port = had.NetNS, had.Family, had.Port
		return e, true
	}
	return Event{}, false
}

// hasDumped says whether the cgroup has listeners known only from a
// dump: the eBPF program did not see them start, so it will not see
// them close either.
func (t *tracker) hasDumped(cgroup uint64) bool {
	for _, s := range t.cgroups[cgroup] {
		if s.dumped {
			return true
		}
	}
	return false
}

// scanStart marks the start of a dump; pass its result to scanned.
func (t *tracker) scanStart() uint64 {
	t.scanning++
	return t.gen
}

// scanned applies a dump of the cgroup's listeners begun at generation
// since, and returns the transitions, ordered by port.
func (t *tracker) scanned(cgroup, since uint64, now []socket, seen time.Time) []Event {
	defer t.scanDone()
	open := t.cgroups[cgroup]
	if open == nil {
		return nil
	}
	var out []Event
	present := map[uint64]bool{}
	for _, s := range now {
		present[s.Cookie] = true
		if _, ok := open[s.Cookie]; ok {
			continue
		}
		if g, ok := t.closed[s.Cookie]; (ok && g > since) || len(open) >= maxListeners {
			continue
		}
		open[s.Cookie] = tracked{socket: s, gen: since, dumped: true}
		out = append(out, event(Listening, cgroup, s, seen))
	}
	for cookie, s := range open {
		if !present[cookie] && s.gen <= since {
			delete(open, cookie)
			out = append(out, event(Closed, cgroup, s.socket, seen))
		}
	}
	slices.SortFunc(out, func(a, b Event) int {
		return cmp.Or(cmp.Compare(a.Port, b.Port), cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Socket, b.Socket))
	})
	return out
}

// scanDone ends a dump without a result (it failed).
func (t *tracker) scanDone() {
	t.scanning--
	if t.scanning == 0 {
		clear(t.closed)
	}
}

func event(k Kind, cgroup uint64, s socket, seen time.Time) Event {
	return Event{Kind: k, Cgroup: cgroup, NetNS: s.NetNS, Family: s.Family, Port: s.Port, Socket: s.Cookie, Seen: seen}
}
