package fleetdb

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/podvisor/podvisor/test/pgtest"
)

// Writers racing to move the same device's desired generation: in each
// round exactly one of them stores the next generation and the others
// are refused, as on SQLite's one connection. On PostgreSQL the writers
// run on connections of their own; the store's writer lock
// (sqldb/postgres) is what keeps the read of the generation and the
// write of the next one together.
func TestConcurrentWritersOneWins(t *testing.T) { pgtest.EachStore(t, testConcurrentWritersOneWins) }

func testConcurrentWritersOneWins(t *testing.T) {
	f := testFleet(t, "dev")
	const rounds, writers = 10, 4
	for round := int64(1); round <= rounds; round++ {
		var wg sync.WaitGroup
		start := make(chan struct{})
		errs := make([]error, writers)
		for w := range writers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[w] = f.SaveDesired(DesiredDoc{Device: "dev", Generation: round,
					Pods: []json.RawMessage{json.RawMessage(fmt.Sprintf(`{"writer":%d}`, w))}, Document: []byte(fmt.Sprintf(`{"round":%d}`, round))})
			}()
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d writers stored generation %d (errors %v), want exactly one", round, won, round, errs)
		}
		d, err := f.Desired("dev")
		if err != nil || d.Generation != round {
			t.Fatalf("round %d: stored generation %d, %v", round, d.Generation, err)
		}
	}
}
