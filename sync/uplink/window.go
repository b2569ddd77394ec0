package uplink

import (
	"fmt"
	"time"
)

// window is the outbox's send window: which sequence numbers were sent,
// which the hub stored, and when the stream last moved. It decides and
// does no I/O: the agent holds its lock, passes the time and acts on the
// answers (store.Ack, a new epoch, a reconnect).
type window struct {
	size        int           // items sent and not yet acknowledged, at most
	resendAfter time.Duration // how long sent items may wait for a receipt
	// sent and acked are sequence numbers: published, and stored by the
	// hub; assigned is the highest ever sent in this epoch; inflight
	// counts the items in between; progress is when the window last
	// moved; desync says the hub's receipts named numbers this outbox
	// never sent, or forgot what it had stored; stalls counts resends in
	// a row without a receipt; lastEpoch is when the epoch began.
	sent, acked, assigned int64
	inflight              int
	progress              time.Time
	desync                bool
	stalls                int
	lastEpoch             time.Time
}

// receiptVerdict is what a status receipt asks of the agent.
type receiptVerdict struct {
	// refused: the receipt is not believed (counted, logged).
	refused error
	// newEpoch: the hub has lost what it stored; send everything again.
	newEpoch bool
	// forget: the outbox may drop the items up to this number (0: none).
	forget int64
}

// receipt takes the hub's receipt for sequence seq of this epoch. One for
// a number this outbox never sent, or one that asks to resend from below
// what the hub already stored, is not believed: the hub's cursor is
// marked untrusted (desync), so that a stream the hub stopped taking
// moves to a new epoch instead of stalling.
func (w *window) receipt(seq int64, resend bool, now time.Time) receiptVerdict {
	if seq > w.assigned || (resend && seq < w.acked) {
		w.desync = true
		return receiptVerdict{
			refused: fmt.Errorf("a receipt for sequence %d (resend %v): this outbox sent up to %d and the hub stored up to %d",
				seq, resend, w.assigned, w.acked),
			newEpoch: seq < w.acked && now.Sub(w.lastEpoch) > w.resendAfter,
		}
	}
	if resend {
		// The hub missed a batch: send again from what it has.
		w.sent, w.inflight, w.progress = max(seq, w.acked), 0, now
	}
	if seq <= w.acked {
		return receiptVerdict{}
	}
	w.acked, w.progress = seq, now
	w.desync, w.stalls = false, 0
	return receiptVerdict{forget: seq}
}

// tickVerdict is what the periodic check asks of the agent.
type tickVerdict struct {
	resend    bool // sending again from the last receipt
	reconnect bool // twice in a row without a receipt
	newEpoch  bool // stalled on a cursor that is not believed
}

// tick checks for a stream that stopped moving: sent items without a
// receipt for longer than resendAfter are sent again; twice in a row the
// connection is renewed too (a broker may have lost this client, after a
// session takeover race, while the connection looks up); stalled with
// the hub's cursor untrusted, a new epoch starts.
func (w *window) tick(now time.Time) tickVerdict {
	stalled := w.sent > w.acked && now.Sub(w.progress) > w.resendAfter
	if !stalled {
		return tickVerdict{}
	}
	if w.desync {
		return tickVerdict{newEpoch: true}
	}
	w.sent, w.inflight, w.progress = w.acked, 0, now
	w.stalls++
	return tickVerdict{resend: true, reconnect: w.stalls >= 2}
}

// rewind sends again from the last receipt: at a new connection, and
// when the hub comes back (the broker may have dropped what was sent
// while it was away).
func (w *window) rewind(now time.Time) {
	w.sent, w.inflight, w.progress = w.acked, 0, now
}

// newEpoch starts the sequence over: everything kept is sent again from 1.
func (w *window) newEpoch(now time.Time) {
	w.sent, w.acked, w.assigned, w.inflight = 0, 0, 0, 0
	w.progress, w.lastEpoch, w.desync = now, now, false
}

// next is where the next batch starts and how many items it may hold
// (0: the window is full).
func (w *window) next() (after int64, room int) {
	if w.sent <= w.acked {
		w.inflight = 0
	}
	return w.sent, w.size - w.inflight
}

// numbered notes that items up to last are being sent: a receipt for
// them may come before the publish returns.
func (w *window) numbered(last int64) {
	w.assigned = max(w.assigned, last)
}

// published records a batch of n items up to last, sent from from; false
// when the window was reset meanwhile (a reconnect, a resend request),
// and the batch does not count.
func (w *window) published(from, last int64, n int, now time.Time) bool {
	if w.sent != from {
		return false
	}
	if w.inflight == 0 {
		w.progress = now
	}
	w.sent, w.inflight = last, w.inflight+n
	return true
}
