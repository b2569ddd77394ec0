package listen

import (
	"testing"
	"time"
)

var t0 = time.Unix(1_000_000, 0)

func ev(k Kind, cgroup, cookie uint64, port uint16) Event {
	return Event{Kind: k, Cgroup: cgroup, NetNS: 7, Family: 10, Port: port, Socket: cookie}
}

func sock(cookie uint64, port uint16) socket {
	return socket{NetNS: 7, Family: 10, Port: port, Cookie: cookie}
}

func TestTrackerReportsTransitionsOnce(t *testing.T) {
	tr := newTracker()
	tr.watch(1)
	if _, ok := tr.observe(ev(Listening, 2, 5, 80)); ok {
		t.Fatal("an event of an unwatched cgroup was reported")
	}
	if e, ok := tr.observe(ev(Listening, 1, 5, 80)); !ok || e.Port != 80 {
		t.Fatalf("listen: %v %v", e, ok)
	}
	if _, ok := tr.observe(ev(Listening, 1, 5, 80)); ok {
		t.Fatal("a repeated listen was reported")
	}
	// A dump that sees it reports nothing new.
	if out := tr.scanned(1, tr.scanStart(), []socket{sock(5, 80)}, t0); len(out) != 0 {
		t.Fatalf("dump of a known listener reported %v", out)
	}
	// The close carries what the listen said, whatever the close event says.
	e, ok := tr.observe(Event{Kind: Closed, Cgroup: 1, Socket: 5})
	if !ok || e.Port != 80 || e.Family != 10 || e.NetNS != 7 {
		t.Fatalf("close: %v %v", e, ok)
	}
	if _, ok := tr.observe(ev(Closed, 1, 5, 80)); ok {
		t.Fatal("a repeated close was reported")
	}
}

func TestTrackerDumpsAreAuthoritativeUpToTheirStart(t *testing.T) {
	tr := newTracker()
	tr.watch(1)
	out := tr.scanned(1, tr.scanStart(), []socket{sock(5, 80), sock(6, 81)}, t0)
	if len(out) != 2 || out[0].Port != 80 || out[1].Port != 81 || out[0].Kind != Listening || !out[0].Seen.Equal(t0) {
		t.Fatalf("first dump: %v", out)
	}
	if !tr.hasDumped(1) {
		t.Fatal("listeners from a dump are not marked")
	}
	out = tr.scanned(1, tr.scanStart(), []socket{sock(6, 81)}, t0)
	if len(out) != 1 || out[0].Kind != Closed || out[0].Socket != 5 {
		t.Fatalf("second dump: %v", out)
	}
}

// A listen that an event reports while a dump is under way survives the
// dump that did not see it; a close reported meanwhile is not undone by
// the dump that still saw the listener.
func TestTrackerDumpRacingEvents(t *testing.T) {
	tr := newTracker()
	tr.watch(1)
	tr.observe(ev(Listening, 1, 5, 80))

	since := tr.scanStart()
	tr.observe(ev(Listening, 1, 6, 81)) // after the dump read the kernel
	tr.observe(ev(Closed, 1, 5, 80))    // likewise
	out := tr.scanned(1, since, []socket{sock(5, 80)}, t0)
	if len(out) != 0 {
		t.Fatalf("the stale dump changed state: %v", out)
	}
	if _, ok := tr.cgroups[1][6]; !ok {
		t.Fatal("the listen reported during the dump was dropped")
	}
	if _, ok := tr.cgroups[1][5]; ok {
		t.Fatal("the dump brought back a closed listener")
	}
	if len(tr.closed) != 0 || tr.scanning != 0 {
		t.Fatalf("tombstones kept after the last dump: %v (scanning %d)", tr.closed, tr.scanning)
	}
	// Without a dump under way no tombstones are kept.
	tr.observe(ev(Closed, 1, 6, 81))
	if len(tr.closed) != 0 {
		t.Fatalf("tombstones kept with no dump under way: %v", tr.closed)
	}
}

func TestTrackerUnwatchForgets(t *testing.T) {
	tr := newTracker()
	tr.watch(1)
	tr.observe(ev(Listening, 1, 5, 80))
	tr.unwatch(1)
	if tr.watching(1) {
		t.Fatal("still watching")
	}
	if out := tr.scanned(1, tr.scanStart(), []socket{sock(5, 80)}, t0); out != nil {
		t.Fatalf("dump of an unwatched cgroup reported %v", out)
	}
	if tr.scanning != 0 {
		t.Fatal("scan left open")
	}
}

// A cgroup's listeners are bounded, from events and from dumps alike.
func TestTrackerBoundsListenersPerCgroup(t *testing.T) {
	tr := newTracker()
	tr.watch(1)
	for i := range maxListeners + 10 {
		tr.observe(ev(Listening, 1, uint64(i+1), uint16(i)))
	}
	if n := len(tr.cgroups[1]); n != maxListeners {
		t.Fatalf("%d listeners kept from events, want %d", n, maxListeners)
	}
	tr.watch(2)
	var many []socket
	for i := range maxListeners + 10 {
		many = append(many, sock(uint64(100000+i), uint16(i)))
	}
	if out := tr.scanned(2, tr.scanStart(), many, t0); len(out) != maxListeners || len(tr.cgroups[2]) != maxListeners {
		t.Fatalf("a dump added %d listeners (%d kept), want %d", len(out), len(tr.cgroups[2]), maxListeners)
	}
}
