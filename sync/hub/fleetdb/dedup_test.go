package fleetdb

import (
	"fmt"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// Status dedup across replicas: the (epoch, seq) cursor check runs in
// the store under the device's lock (beginDevice), so two replicas (two Fleet handles,
// two pools, on one PostgreSQL) storing one batch at once, or one after
// the other (a device resending to a new owner what the dead one
// stored), apply each item once and keep each event once.
func TestStatusBatchStoredOnceAcrossReplicas(t *testing.T) {
	store := pgtest.URL(t)
	open := func() *Fleet {
		f, err := OpenStore(store)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
	a, b := open(), open()
	if err := a.AddDevice("dev"); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 0)
	batch := func(after int64, n int) *protocol.StatusBatch {
		bt := &protocol.StatusBatch{Device: "dev", Epoch: "e1", After: after}
		for i := range n {
			seq := after + int64(i) + 1
			item := protocol.StatusItem{Seq: seq, Key: "default/p"}
			if seq%2 == 0 {
				item.Pod = &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "default",
					Annotations: map[string]string{"seq": fmt.Sprint(seq)}}}
			} else {
				item.Event = &protocol.Event{Time: at, Type: "Normal", Reason: "Load", Message: fmt.Sprintf("item %d", seq)}
			}
			bt.Items = append(bt.Items, item)
		}
		return bt
	}
	for round := range 20 {
		after := int64(round * 10)
		bt := batch(after, 10)
		var wg sync.WaitGroup
		results := make([]StatusStored, 2)
		errs := make([]error, 2)
		for i, f := range []*Fleet{a, b} {
			wg.Go(func() { results[i], errs[i] = f.StoreStatus(bt, at) })
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: %v, %v", round, errs[0], errs[1])
		}
		if results[0].Applied+results[1].Applied != 10 {
			t.Fatalf("round %d: applied %d and %d, want 10 in all", round, results[0].Applied, results[1].Applied)
		}
		if results[0].Cursor != after+10 || results[1].Cursor != after+10 {
			t.Fatalf("round %d: cursors %d, %d, want %d", round, results[0].Cursor, results[1].Cursor, after+10)
		}
		// Again through the other, afterwards: nothing new.
		if r, err := b.StoreStatus(bt, at); err != nil || r.Applied != 0 || r.Cursor != after+10 {
			t.Fatalf("round %d: the batch again: %+v %v", round, r, err)
		}
	}
	evs, err := a.Events("dev")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range evs {
		if seen[e.Message] {
			t.Fatalf("event %q stored twice", e.Message)
		}
		seen[e.Message] = true
	}
	if len(seen) != 100 {
		t.Fatalf("%d events stored, want 100", len(seen))
	}
}
