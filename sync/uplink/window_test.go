package uplink

import (
	"strings"
	"testing"
	"time"
)

// The send window as a timeline on a fake clock: batches fill it,
// receipts move it, a stall resends and then reconnects, receipts that
// name numbers never sent are refused and, stalled on them, start a new
// epoch.
func TestWindowTimeline(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	w := window{size: 10, resendAfter: 30 * time.Second, lastEpoch: t0}

	// Two batches of 4: the window has room for 2 more.
	for _, b := range []struct{ from, last int64 }{{0, 4}, {4, 8}} {
		after, room := w.next()
		if after != b.from || room < 4 {
			t.Fatalf("next: after %d room %d, want after %d and room for 4", after, room, b.from)
		}
		w.numbered(b.last)
		if !w.published(b.from, b.last, 4, at(1)) {
			t.Fatalf("batch after %d not counted", b.from)
		}
	}
	if after, room := w.next(); after != 8 || room != 2 {
		t.Fatalf("next: after %d room %d, want 8 and 2", after, room)
	}

	// A receipt for 4 lets the outbox forget up to 4; an old one is nothing.
	if v := w.receipt(4, false, at(2)); v.forget != 4 || v.refused != nil || v.newEpoch {
		t.Fatalf("receipt 4: %+v", v)
	}
	if v := w.receipt(3, false, at(2)); v != (receiptVerdict{}) {
		t.Fatalf("an older receipt: %+v", v)
	}

	// No receipt for 30 s: nothing yet; past it, a resend from 4.
	if v := w.tick(at(32)); v != (tickVerdict{}) {
		t.Fatalf("tick at 30 s: %+v", v)
	}
	if v := w.tick(at(33)); !v.resend || v.reconnect || v.newEpoch {
		t.Fatalf("first stall: %+v", v)
	}
	if after, room := w.next(); after != 4 || room != 10 {
		t.Fatalf("after a resend: after %d room %d, want 4 and 10", after, room)
	}
	// A batch sent before the resend returns late: it does not count.
	if w.published(8, 12, 4, at(33)) {
		t.Fatalf("a batch from before the resend counted")
	}
	// Sent again, still no receipt: a resend and a new connection.
	w.published(4, 8, 4, at(34))
	if v := w.tick(at(65)); !v.resend || !v.reconnect {
		t.Fatalf("second stall: %+v", v)
	}
	// A receipt ends the stalls.
	w.published(4, 8, 4, at(66))
	if v := w.receipt(8, false, at(67)); v.forget != 8 {
		t.Fatalf("receipt 8: %+v", v)
	}
	w.numbered(9)
	w.published(8, 9, 1, at(68))
	if v := w.tick(at(99)); !v.resend || v.reconnect {
		t.Fatalf("a stall after a receipt counts as the first: %+v", v)
	}

	// The hub missed a batch: it asks to resend from 8.
	w.published(8, 9, 1, at(100))
	if v := w.receipt(8, true, at(101)); v.refused != nil || v.forget != 0 {
		t.Fatalf("resend request: %+v", v)
	}
	if after, _ := w.next(); after != 8 {
		t.Fatalf("after a resend request: after %d, want 8", after)
	}

	// Forged receipts: beyond what was sent, or a resend from below what
	// the hub stored. Refused, and the cursor is no longer believed.
	if v := w.receipt(500, false, at(102)); v.refused == nil || v.forget != 0 || !strings.Contains(v.refused.Error(), "sent up to 9") {
		t.Fatalf("a receipt for 500: %+v", v)
	}
	// Below the stored cursor more than resendAfter into the epoch: the
	// hub has lost what it stored.
	if v := w.receipt(2, true, at(103)); v.refused == nil || !v.newEpoch {
		t.Fatalf("a resend from 2 with 8 stored: %+v", v)
	}
	// Stalled on an untrusted cursor: a new epoch, not a resend.
	w.published(8, 9, 1, at(104))
	if v := w.tick(at(140)); !v.newEpoch || v.resend {
		t.Fatalf("stalled while desynced: %+v", v)
	}
	w.newEpoch(at(140))
	if after, room := w.next(); after != 0 || room != 10 || w.acked != 0 || w.assigned != 0 || w.desync {
		t.Fatalf("new epoch: after %d room %d %+v", after, room, w)
	}
	// Early in an epoch a low resend request is refused, but no epoch
	// follows at once (the hub may just be catching up).
	w.numbered(3)
	w.published(0, 3, 3, at(141))
	w.receipt(3, false, at(142))
	if v := w.receipt(1, true, at(143)); v.refused == nil || v.newEpoch {
		t.Fatalf("a low resend request early in the epoch: %+v", v)
	}
}

// A rewind (a new connection, the hub back online) sends again from the
// last receipt, with an empty window.
func TestWindowRewind(t *testing.T) {
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	w := window{size: 4, resendAfter: time.Minute}
	w.numbered(4)
	w.published(0, 4, 4, t0)
	w.receipt(2, false, t0)
	if _, room := w.next(); room != 0 {
		t.Fatalf("room %d in a full window", room)
	}
	w.rewind(t0.Add(time.Second))
	if after, room := w.next(); after != 2 || room != 4 || !w.progress.Equal(t0.Add(time.Second)) {
		t.Fatalf("after a rewind: after %d room %d progress %v", after, room, w.progress)
	}
}
