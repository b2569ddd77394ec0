package store

import (
	"fmt"
	"path/filepath"
	"testing"
)

// BenchmarkOutboxBatch is a device's cost of one status batch: the
// daemon adds a batch of distinct pods' statuses, the agent numbers and
// reads them (Next), the hub's receipt settles them (Ack).
func BenchmarkOutboxBatch(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "state.db"), Limits{Rows: 1 << 20, Bytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const batch = 64
	payload := make([]byte, 300)
	var seq int64
	for i := 0; b.Loop(); i++ {
		items := make([]Item, batch)
		for j := range items {
			items[j] = Item{Key: fmt.Sprintf("default/pod-%d-%d", i, j), Kind: KindPod, Payload: payload}
		}
		if err := s.Add(items); err != nil {
			b.Fatal(err)
		}
		rows, err := s.Next(seq, batch)
		if err != nil || len(rows) != batch {
			b.Fatal(len(rows), err)
		}
		seq = rows[len(rows)-1].Seq
		if err := s.Ack(seq); err != nil {
			b.Fatal(err)
		}
	}
}
