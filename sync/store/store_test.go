package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/protocol"
)

func open(t *testing.T, path string, l Limits) *Store {
	t.Helper()
	s, err := Open(path, l)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestDesiredSurvivesReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, DefaultLimits)
	if _, ok, err := s.Desired(); ok || err != nil {
		t.Fatalf("empty store has a document: %v %v", ok, err)
	}
	rec := DesiredRecord{Generation: 7, Document: []byte(`{"signed":true}`), Results: []protocol.PodResult{{Name: "web", Accepted: true}}}
	if err := s.SaveDesired(rec); err != nil {
		t.Fatal(err)
	}
	rec.Generation, rec.Document = 8, []byte(`{"signed":8}`)
	if err := s.SaveDesired(rec); err != nil {
		t.Fatal(err)
	}
	epoch := s.Epoch()
	s.Close()
	s = open(t, path, DefaultLimits)
	got, ok, err := s.Desired()
	if err != nil || !ok || got.Generation != 8 || !bytes.Equal(got.Document, rec.Document) || !got.Results[0].Accepted {
		t.Fatalf("after reopen: %+v %v %v", got, ok, err)
	}
	if s.Epoch() != epoch || epoch == "" {
		t.Fatalf("epoch %q after reopen, was %q", s.Epoch(), epoch)
	}
	// A new database is a new epoch.
	other := open(t, filepath.Join(t.TempDir(), "state.db"), DefaultLimits)
	if other.Epoch() == epoch {
		t.Fatal("two databases share an epoch")
	}
}

func TestOutboxCoalescesPodsAndKeepsOrder(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), DefaultLimits)
	add := func(items ...Item) {
		t.Helper()
		if err := s.Add(items); err != nil {
			t.Fatal(err)
		}
	}
	add(Item{"default/web", KindPod, []byte("web v1")}, Item{"default/db", KindPod, []byte("db v1")})
	add(Item{"default/web", KindEvent, []byte("web killed")}, Item{"default/web", KindPod, []byte("web v2")}, Item{"default/gone", KindPod, nil})
	rows, err := s.Next(0, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, string(r.Payload))
	}
	if fmt.Sprint(got) != "[db v1 web killed web v2 ]" || len(rows[3].Payload) != 0 {
		t.Fatalf("outbox %v", got)
	}
	// The hub stored up to the event: those rows go, the rest stay.
	if err := s.Ack(rows[1].Seq); err != nil {
		t.Fatal(err)
	}
	rest, _ := s.Next(0, 10)
	if len(rest) != 2 || string(rest[0].Payload) != "web v2" {
		t.Fatalf("after ack: %+v", rest)
	}
	if next, _ := s.Next(rest[1].Seq, 10); len(next) != 0 {
		t.Fatalf("Next after the last: %+v", next)
	}
	st, _ := s.Stats()
	if st.Rows != 2 || st.Acked != rows[1].Seq || st.Retained != 1 {
		t.Fatalf("stats %+v, want 2 pending, db's status retained", st)
	}
}

// Numbers on the wire have no gaps: a row is numbered when first sent,
// a sent status is not replaced before the hub's receipt, and a receipt
// beyond what was sent is refused and not stored, across a reopen.
func TestOutboxWireSequenceIsDense(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	s := open(t, path, DefaultLimits)
	s.Add([]Item{{"default/web", KindPod, []byte("web v1")}, {"default/web", KindEvent, []byte("e1")}})
	sent, _ := s.Next(0, 10)
	if len(sent) != 2 || sent[0].Seq != 1 || sent[1].Seq != 2 {
		t.Fatalf("first batch %+v", sent)
	}
	// web changes while v1 is in flight: v1 stays (it may be resent), v2 follows it.
	s.Add([]Item{{"default/web", KindPod, []byte("web v2")}, {"default/web", KindPod, []byte("web v3")}})
	again, _ := s.Next(0, 10)
	var got []string
	for _, r := range again {
		got = append(got, fmt.Sprintf("%d:%s", r.Seq, r.Payload))
	}
	if fmt.Sprint(got) != "[1:web v1 2:e1 3:web v3]" {
		t.Fatalf("resend after coalescing: %v", got)
	}
	if err := s.Ack(1 << 40); !errors.Is(err, ErrNotSent) {
		t.Fatalf("a receipt for seq 2^40: %v, want ErrNotSent", err)
	}
	if err := s.Ack(2); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path, DefaultLimits)
	st, _ := s.Stats()
	if st.Acked != 2 || st.Assigned != 3 || st.Rows != 1 {
		t.Fatalf("after reopen: %+v", st)
	}
	if rest, _ := s.Next(2, 10); len(rest) != 1 || rest[0].Seq != 3 {
		t.Fatalf("after the receipt: %+v", rest)
	}
	// A new epoch numbers every kept status from 1 again.
	old := s.Epoch()
	s.Ack(3)
	s.Add([]Item{{"default/db", KindPod, []byte("db v1")}})
	if epoch, err := s.NewEpoch(); err != nil || epoch == old || s.Epoch() != epoch {
		t.Fatalf("new epoch %q (was %q): %v", epoch, old, err)
	}
	all, _ := s.Next(0, 10)
	got = got[:0]
	for _, r := range all {
		got = append(got, fmt.Sprintf("%d:%s", r.Seq, r.Payload))
	}
	if fmt.Sprint(got) != "[1:web v3 2:db v1]" {
		t.Fatalf("new epoch: %v", got)
	}
}

// pending reads the outbox without sending (numbering) anything.
func pending(t *testing.T, s *Store) []Row {
	rows, err := scanRows(s.db.Query(`SELECT seq, key, kind, payload FROM outbox ORDER BY seq`))
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// Over its limits the outbox drops the oldest events and keeps every
// pod's newest status, even past the limits.
func TestOutboxDropPolicy(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), Limits{Rows: 5, Bytes: 1 << 20})
	var items []Item
	for i := range 4 {
		items = append(items, Item{"default/web", KindEvent, []byte(fmt.Sprintf("event %d", i))})
	}
	s.Add(items)
	s.Add([]Item{{"default/a", KindPod, []byte("a")}, {"default/b", KindPod, []byte("b")}})
	rows := pending(t, s)
	if len(rows) != 5 || string(rows[0].Payload) != "event 1" {
		t.Fatalf("want the oldest event dropped: %+v", rows)
	}
	var pods []Item
	for i := range 8 {
		pods = append(pods, Item{fmt.Sprintf("default/p%d", i), KindPod, []byte("p")})
	}
	s.Add(pods)
	st, _ := s.Stats()
	rows = pending(t, s)
	for _, r := range rows {
		if r.Kind == KindEvent {
			t.Fatalf("an event kept while pods overflow: %+v", r)
		}
	}
	if st.Rows != 10 || st.Dropped != 4 {
		t.Fatalf("stats %+v, want 10 pod rows and 4 dropped events", st)
	}
	// Bytes bound too.
	b := open(t, filepath.Join(t.TempDir(), "state.db"), Limits{Rows: 1000, Bytes: 1000})
	for i := range 20 {
		b.Add([]Item{{"default/web", KindEvent, bytes.Repeat([]byte{byte(i)}, 100)}})
	}
	st, _ = b.Stats()
	if st.Bytes > 1000 || st.Rows < 9 {
		t.Fatalf("bytes-bounded outbox: %+v", st)
	}
}

// Mirrored is each pod's newest status, acknowledged or not, without the
// pods whose newest item is their removal, and without events.
func TestMirroredIsTheNewestStatusOfEachPod(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), DefaultLimits)
	add := func(items ...Item) {
		t.Helper()
		if err := s.Add(items); err != nil {
			t.Fatal(err)
		}
	}
	add(Item{Key: "default/web", Kind: KindPod, Payload: []byte(`web-1`)},
		Item{Key: "default/db", Kind: KindPod, Payload: []byte(`db-1`)},
		Item{Key: "default/old", Kind: KindPod, Payload: []byte(`old-1`)},
		Item{Key: "default/web", Kind: KindEvent, Payload: []byte(`event`)})
	rows, err := s.Next(0, 10) // sent: the next web status cannot replace its row
	if err != nil || len(rows) != 4 {
		t.Fatalf("next: %d rows, %v", len(rows), err)
	}
	add(Item{Key: "default/web", Kind: KindPod, Payload: []byte(`web-2`)}, Item{Key: "default/old", Kind: KindPod})
	if err := s.Ack(2); err != nil {
		t.Fatal(err)
	}
	got, err := s.Mirrored()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"default/web": "web-2", "default/db": "db-1"}
	if len(got) != len(want) {
		t.Fatalf("mirrored %q, want %q", got, want)
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Fatalf("mirrored %q, want %q", got, want)
		}
	}
}

// A receipt deletes only the rows it covers; what earlier receipts left
// (pods' newest statuses) must then be exactly what a delete over the
// whole outbox would keep, through pods replaced while in flight, after
// their receipt, removals and events, in seeded random order.
func TestAckSettlesOnlyItsRows(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), DefaultLimits)
	rng := rand.New(rand.NewPCG(7, 11))
	var sent int64
	for step := range 400 {
		var items []Item
		for range rng.IntN(5) {
			key := fmt.Sprintf("default/p%d", rng.IntN(12))
			switch rng.IntN(6) {
			case 0:
				items = append(items, Item{key, KindEvent, []byte("ev")})
			case 1:
				items = append(items, Item{key, KindPod, nil})
			default:
				items = append(items, Item{key, KindPod, fmt.Appendf(nil, "%s@%d", key, step)})
			}
		}
		if err := s.Add(items); err != nil {
			t.Fatal(err)
		}
		if rng.IntN(2) == 0 {
			rows, err := s.Next(sent, 1+rng.IntN(6))
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) > 0 {
				sent = rows[len(rows)-1].Seq
			}
		}
		st, _ := s.Stats()
		if st.Assigned > st.Acked && rng.IntN(3) == 0 {
			if err := s.Ack(st.Acked + 1 + rng.Int64N(st.Assigned-st.Acked)); err != nil {
				t.Fatal(err)
			}
			st, _ = s.Stats()
			// The delete over every acknowledged row finds nothing left.
			res, err := s.db.Exec(`DELETE FROM outbox WHERE wseq <= ? AND (kind = ? OR LENGTH(payload) = 0
				OR EXISTS (SELECT 1 FROM outbox o WHERE o.key = outbox.key AND o.kind = outbox.kind AND o.seq > outbox.seq))`, st.Acked, KindEvent)
			if err != nil {
				t.Fatal(err)
			}
			if n, _ := res.RowsAffected(); n != 0 {
				t.Fatalf("step %d: %d acknowledged rows left that the receipt at %d should have settled", step, n, st.Acked)
			}
		}
		if st.Retained > 12 {
			t.Fatalf("step %d: %d retained statuses of 12 pods", step, st.Retained)
		}
	}
}

// Add counts the outbox only when what it knows of its size may pass the
// limits; the limits hold after every Add all the same, through receipts
// that shrink it and a reopen that forgets the count.
func TestOutboxLimitsHoldWithoutCountingEveryAdd(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	l := Limits{Rows: 30, Bytes: 600}
	s := open(t, path, l)
	var sent int64
	for i := range 300 {
		if i == 150 {
			s.Close()
			s = open(t, path, l)
		}
		payload := bytes.Repeat([]byte{'x'}, 1+i%40)
		if err := s.Add([]Item{{fmt.Sprintf("default/p%d", i%4), KindPod, []byte("p")}, {"default/web", KindEvent, payload}}); err != nil {
			t.Fatal(err)
		}
		var rows int
		var size int64
		if err := s.db.QueryRow(`SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM outbox`).Scan(&rows, &size); err != nil {
			t.Fatal(err)
		}
		if rows > l.Rows || size > l.Bytes {
			t.Fatalf("add %d: the outbox holds %d rows, %d bytes; limits %+v", i, rows, size, l)
		}
		if i%7 == 0 {
			next, err := s.Next(sent, 5)
			if err != nil {
				t.Fatal(err)
			}
			if len(next) > 0 {
				sent = next[len(next)-1].Seq
				if err := s.Ack(sent); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
}

// Next numbers only as many unsent items as the batch takes, in the
// order they were added, and sends the numbered ones again first.
func TestOutboxNumbersABatchAtATime(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), DefaultLimits)
	for _, p := range []string{"a", "b", "c", "d", "e"} {
		if err := s.Add([]Item{{"default/" + p, KindPod, []byte(p)}}); err != nil {
			t.Fatal(err)
		}
	}
	// b changes before anything is sent: it moves behind e.
	s.Add([]Item{{"default/b", KindPod, []byte("b2")}})
	wire := func(after int64, n int) string {
		t.Helper()
		rows, err := s.Next(after, n)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%d:%s", r.Seq, r.Payload))
		}
		return fmt.Sprint(got)
	}
	for _, step := range []struct {
		after int64
		n     int
		want  string
	}{
		{0, 2, "[1:a 2:c]"},
		{2, 2, "[3:d 4:e]"},
		{1, 2, "[2:c 3:d]"},
		{0, 10, "[1:a 2:c 3:d 4:e 5:b2]"},
		{5, 10, "[]"},
	} {
		if got := wire(step.after, step.n); got != step.want {
			t.Fatalf("Next(%d, %d) = %s, want %s", step.after, step.n, got, step.want)
		}
	}
	if st, _ := s.Stats(); st.Assigned != 5 {
		t.Fatalf("assigned %d, want 5", st.Assigned)
	}
}

// SaveDesired's statement is prepared once and runs on the connection it
// holds at synchronous=FULL; each save replaces the last, and the
// connection goes back to NORMAL for the outbox's writes.
func TestSaveDesiredRepeatedlyLeavesNormal(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "state.db"), DefaultLimits)
	for gen := int64(1); gen <= 3; gen++ {
		rec := DesiredRecord{Generation: gen, Document: []byte(fmt.Sprintf(`{"generation":%d}`, gen)),
			Results: []protocol.PodResult{{Name: "web", Accepted: gen%2 == 1}}}
		if err := s.SaveDesired(rec); err != nil {
			t.Fatal(err)
		}
		got, ok, err := s.Desired()
		if err != nil || !ok || got.Generation != gen || !bytes.Equal(got.Document, rec.Document) || got.Results[0].Accepted != rec.Results[0].Accepted {
			t.Fatalf("generation %d: read back %+v %v %v", gen, got, ok, err)
		}
		var level int
		if err := s.db.QueryRow(`PRAGMA synchronous`).Scan(&level); err != nil || level != 1 {
			t.Fatalf("after saving generation %d: synchronous = %d (%v), want 1 (NORMAL)", gen, level, err)
		}
		if err := s.Add([]Item{{Key: "default/web", Kind: KindPod, Payload: []byte(`{}`)}}); err != nil {
			t.Fatalf("the outbox after saving generation %d: %v", gen, err)
		}
	}
}

// One Add of many items (chunked statements, a pod's statuses coalesced
// within the call) leaves the outbox as adding them one at a time does:
// the same items in the same order, a pod on its way to the hub kept
// beside its newer status, events all kept.
func TestAddManyIsAddingOneByOne(t *testing.T) {
	var items []Item
	for i := range 3*addChunk + 7 {
		switch {
		case i%5 == 0:
			items = append(items, Item{Key: fmt.Sprintf("default/p%d", i%7), Kind: KindEvent, Payload: []byte(fmt.Sprintf("e%d", i))})
		case i%11 == 0:
			items = append(items, Item{Key: fmt.Sprintf("default/p%d", i%13), Kind: KindPod}) // gone from the device
		default:
			items = append(items, Item{Key: fmt.Sprintf("default/p%d", i%13), Kind: KindPod, Payload: []byte(fmt.Sprintf("s%d", i))})
		}
	}
	outbox := func(one bool) string {
		s := open(t, filepath.Join(t.TempDir(), "state.db"), DefaultLimits)
		// p1 and p2 on their way to the hub: their rows stay.
		if err := s.Add([]Item{{"default/p1", KindPod, []byte("sent1")}, {"default/p2", KindPod, []byte("sent2")}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Next(0, 2); err != nil {
			t.Fatal(err)
		}
		if one {
			for _, it := range items {
				if err := s.Add([]Item{it}); err != nil {
					t.Fatal(err)
				}
			}
		} else if err := s.Add(items); err != nil {
			t.Fatal(err)
		}
		rows, err := s.Next(0, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range rows {
			got = append(got, fmt.Sprintf("%d:%s:%s:%q", r.Seq, r.Kind, r.Key, r.Payload))
		}
		return strings.Join(got, " ")
	}
	one, all := outbox(true), outbox(false)
	if one != all {
		t.Fatalf("one Add of %d items:\n%s\nwant, as added one by one:\n%s", len(items), all, one)
	}
	if !strings.Contains(one, `"sent1"`) || !strings.Contains(one, `"e0"`) || strings.Count(one, "default/p3") < 2 {
		t.Fatalf("the outbox lost what it must keep: %s", one)
	}
}
