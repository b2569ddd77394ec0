package fleetdb

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// BenchmarkCopyStore times CopyStore of a fleet of 1,000 and 10,000
// devices (fillFleet's: each enrolled, labelled, with a heartbeat, a
// desired document, a mirror pod, two events, an ack and an object
// index; and, in the last, 50 more events each) into test/pgtest's
// PostgreSQL (fsync off, on the same machine). Filling the SQLite
// fleet is not timed; each copy goes into a fresh database. Run one at
// a time: -bench CopyStore -benchtime 1x.
func BenchmarkCopyStore(b *testing.B) {
	for _, c := range []struct{ devices, events int }{{1000, 0}, {10000, 0}, {10000, 50}} {
		b.Run(fmt.Sprintf("devices=%d,events=+%d", c.devices, c.events), func(b *testing.B) {
			src := openLite(b)
			start := time.Now()
			fillFleet(b, src, c.devices)
			addEvents(b, src, c.devices, c.events)
			b.Logf("filled %d devices in %s", c.devices, time.Since(start).Round(time.Millisecond))
			b.ResetTimer()
			var rows int64
			for range b.N {
				b.StopTimer()
				dst := openFreshPG(b)
				b.StartTimer()
				copied, err := CopyStore(context.Background(), dst, src, 0)
				if err != nil {
					b.Fatal(err)
				}
				rows = 0
				for _, c := range copied {
					rows += c.Rows
				}
			}
			b.ReportMetric(float64(rows), "rows")
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// addEvents stores n more events of each of fillFleet's devices, as a
// device reports them (one batch each, after fillFleet's).
func addEvents(b *testing.B, f *Fleet, devices, n int) {
	if n == 0 {
		return
	}
	at := time.UnixMilli(1700000000000)
	for i := range devices {
		batch := &protocol.StatusBatch{Device: fmt.Sprintf("dev-%05d", i), Epoch: "e1", After: 3}
		for j := range n {
			batch.Items = append(batch.Items, protocol.StatusItem{Seq: int64(4 + j), Key: "default/app",
				Event: &protocol.Event{Time: at.Add(time.Duration(j) * time.Second), Type: "Warning", Reason: "BackOff",
					Message: "Back-off restarting failed container app in pod app_default"}})
		}
		if _, _, gap, err := f.ApplyStatus(batch, at); err != nil || gap {
			b.Fatal(gap, err)
		}
	}
}
