package fleetwatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNotesRoundTrip(t *testing.T) {
	at := time.UnixMilli(1795000000123)
	ns := Notes{}
	ns.Add(Note{Device: "dev-1", What: Pods})
	ns.Add(Note{Device: "dev-1", What: Node, Heard: at})
	ns.Add(Note{Device: "dev-1", What: Node, Heard: at.Add(-time.Second)}) // older: the newest is kept
	ns.Add(Note{Device: "", What: Workloads})
	payloads := Encode("0a1b", ns)
	if len(payloads) != 1 {
		t.Fatalf("Encode = %q, want one payload", payloads)
	}
	if want := "pw1 0a1b 8: 3:dev-1@1795000000123"; payloads[0] != want {
		t.Fatalf("payload %q, want %q", payloads[0], want)
	}
	instance, notes, err := Decode(payloads[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []Note{{Device: "", What: Workloads}, {Device: "dev-1", What: Node | Pods, Heard: at}}
	if instance != "0a1b" || !slices.EqualFunc(notes, want, func(a, b Note) bool {
		return a.Device == b.Device && a.What == b.What && a.Heard.Equal(b.Heard)
	}) {
		t.Fatalf("Decode = %s %v, want 0a1b %v", instance, notes, want)
	}
}

func TestEncodeBoundsPayloads(t *testing.T) {
	ns := Notes{}
	for i := range 300 {
		ns.Add(Note{Device: fmt.Sprintf("device-%056d", i), What: Node, Heard: time.UnixMilli(1795000000000)})
	}
	payloads := Encode("ff", ns)
	if len(payloads) < 2 || len(payloads) > MaxPayloads {
		t.Fatalf("%d payloads for 300 long device IDs, want 2 to %d", len(payloads), MaxPayloads)
	}
	seen := 0
	for _, p := range payloads {
		if len(p) > MaxPayload {
			t.Fatalf("a payload of %d bytes, more than %d", len(p), MaxPayload)
		}
		_, notes, err := Decode(p)
		if err != nil {
			t.Fatal(err)
		}
		seen += len(notes)
	}
	if seen != 300 {
		t.Fatalf("the payloads carry %d notes, want 300", seen)
	}
	// Past MaxPayloads, one Everything change instead of a flood.
	for i := range 2000 {
		ns.Add(Note{Device: fmt.Sprintf("more-%058d", i), What: Pods})
	}
	payloads = Encode("ff", ns)
	if len(payloads) != 1 {
		t.Fatalf("%d payloads for 2300 devices, want one Everything change", len(payloads))
	}
	if _, notes, err := Decode(payloads[0]); err != nil || len(notes) != 1 || notes[0] != (Note{What: Everything}) {
		t.Fatalf("Decode(%q) = %v, %v; want one Everything change", payloads[0], notes, err)
	}
	// A signal among them is kept: the Everything change carries it.
	ns.Add(Note{What: SchedulePass})
	payloads = Encode("ff", ns)
	if _, notes, err := Decode(payloads[0]); err != nil || len(notes) != 1 || notes[0] != (Note{What: Everything | SchedulePass}) {
		t.Fatalf("Decode(%q) = %v, %v; want one Everything change with the signal", payloads[0], notes, err)
	}
}

func TestDecodeRefusesWhatEncodeNeverMakes(t *testing.T) {
	for _, p := range []string{
		"",
		"pw1 ab",
		"pw2 ab 1:dev",
		"pw1 AB 1:dev",
		"pw1 " + strings.Repeat("a", 33) + " 1:dev",
		"pw1 ab 1dev",
		"pw1 ab 0:dev",
		"pw1 ab 100:dev",
		"pw1 ab zz:dev",
		"pw1 ab 1:Dev",
		"pw1 ab 1:dev:x",
		"pw1 ab 1:" + strings.Repeat("d", 64),
		"pw1 ab 1:dev@",
		"pw1 ab 1:dev@-5",
		"pw1 ab 1:dev@12x",
		"pw1 ab  1:dev",
		"pw1 ab 1:dev " + strings.Repeat("x", MaxPayload),
	} {
		if _, _, err := Decode(p); err == nil {
			t.Errorf("Decode(%.60q) took it, want an error", p)
		}
	}
}

func TestPublishRelaysDeliverDoesNot(t *testing.T) {
	var f Feed
	var relayed []Note
	f.SetRelay(func(n Note) { relayed = append(relayed, n) })
	s := f.Subscribe()
	defer s.Close()
	f.Publish("", Workloads)
	f.Deliver("a", Pods)
	f.Heard("b", time.Unix(1, 0))
	f.Receive([]Note{{Device: "c", What: Events}, {Device: "d", What: Node, Heard: time.Unix(2, 0)}})
	if want := []Note{{What: Workloads}}; !slices.Equal(relayed, want) {
		t.Fatalf("relayed %v, want %v (only Publish relays)", relayed, want)
	}
	got := s.Take()
	slices.SortFunc(got, func(x, y Change) int { return strings.Compare(x.Device, y.Device) })
	want := []Change{{"", Workloads}, {"a", Pods}, {"b", Node}, {"c", Events}, {"d", Node}}
	if !slices.Equal(got, want) {
		t.Fatalf("subscriber took %v, want %v", got, want)
	}
}

// A heartbeat heard by another replica (a Note with its time) arms this
// replica's silence watch, and the silence it then publishes is relayed
// to the others (their readers see the device go NotReady too).
func TestReceivedHeardArmsTheSilenceWatch(t *testing.T) {
	var f Feed
	relayed := make(chan Note, 16)
	f.SetRelay(func(n Note) { relayed <- n })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.WatchSilence(ctx, 200*time.Millisecond); close(done) }()
	defer func() { cancel(); <-done }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		f.mu.Lock()
		running := f.heard != nil
		f.mu.Unlock()
		if running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the silence watch did not start within 10 s")
		}
	}
	f.Receive([]Note{{Device: "far", What: Node, Heard: time.Now()}})
	select {
	case n := <-relayed:
		if n != (Note{Device: "far", What: Node}) {
			t.Fatalf("relayed %v, want far's silence (a Node change)", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no silence of a device heard through another replica was relayed within 10 s")
	}
}

// A signal goes to the other replicas only: never to this replica's
// subscribers nor its own OnSignal, so that a leader's pass (which
// publishes Workloads) never asks for another. Heard from another
// replica, it reaches OnSignal once per notification, and the readers
// only the changes beside it.
func TestSignalsTravelBetweenReplicasOnly(t *testing.T) {
	var f Feed
	var relayed []Note
	f.SetRelay(func(n Note) { relayed = append(relayed, n) })
	var signalled []Change
	f.OnSignal(func(d string, w What) { signalled = append(signalled, Change{d, w}) })
	s := f.Subscribe()
	defer s.Close()

	f.Signal(SchedulePass)
	f.Signal(Workloads) // not a signal: nothing
	f.Publish("", Workloads)
	if want := []Note{{What: SchedulePass}, {What: Workloads}}; !slices.Equal(relayed, want) {
		t.Fatalf("relayed %v, want %v", relayed, want)
	}
	if got := s.Take(); !slices.Equal(got, []Change{{"", Workloads}}) {
		t.Fatalf("subscriber took %v, want only the published Workloads", got)
	}
	if len(signalled) != 0 {
		t.Fatalf("this replica's own signal reached its OnSignal: %v", signalled)
	}

	f.Receive([]Note{{What: Workloads | SchedulePass}, {Device: "a", What: Node | Objects}})
	if want := []Change{{"", SchedulePass}, {"a", Objects}}; !slices.Equal(signalled, want) {
		t.Fatalf("OnSignal heard %v, want %v", signalled, want)
	}
	got := s.Take()
	slices.SortFunc(got, func(x, y Change) int { return strings.Compare(x.Device, y.Device) })
	if want := []Change{{"", Workloads}, {"a", Node}}; !slices.Equal(got, want) {
		t.Fatalf("subscriber took %v, want %v (no signal)", got, want)
	}
	f.Receive([]Note{{What: UpdatePass}})
	if left := s.Take(); len(left) != 0 {
		t.Fatalf("a notification of a signal alone woke the subscriber with %v", left)
	}

	// Through the wire: a signal is its entry's bits.
	_, notes, err := Decode(Encode("ab", Notes{"": {What: SchedulePass | Objects}})[0])
	if err != nil || len(notes) != 1 || notes[0].What != SchedulePass|Objects {
		t.Fatalf("a signal through Encode and Decode = %v, %v", notes, err)
	}
}

// A heard time from another replica is that replica's clock: one ahead
// of this replica's is taken as this replica's now, so that a skewed (or
// forged) far-future time cannot put off a device's silence; one in the
// past is kept.
func TestReceivedHeardIsClampedToNow(t *testing.T) {
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	f := Feed{now: func() time.Time { return now }}
	ch := make(chan heard, 4)
	f.heard = ch // the silence watch's queue, read here instead
	f.Receive([]Note{
		{Device: "ahead", What: Node, Heard: now.Add(24 * time.Hour)},
		{Device: "behind", What: Node, Heard: now.Add(-time.Second)},
	})
	for _, want := range []heard{{"ahead", now}, {"behind", now.Add(-time.Second)}} {
		select {
		case got := <-ch:
			if got.device != want.device || !got.at.Equal(want.at) {
				t.Errorf("silence watch armed with %s at %s, want %s at %s", got.device, got.at, want.device, want.at)
			}
		default:
			t.Fatalf("silence watch not armed for %s", want.device)
		}
	}
}
