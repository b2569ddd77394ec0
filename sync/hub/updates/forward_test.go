package updates

import (
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
)

// A kick on a replica that does not lead runs no pass: it is forwarded
// (to the leader, through the change feed), coalesced; once the replica
// leads, a kick runs a pass and forwards nothing.
func TestKickOnAReplicaThatDoesNotLeadIsForwarded(t *testing.T) {
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	d := NewDriver(fleet, &publisher{fleet: fleet}, slog.New(slog.DiscardHandler), nil, time.Minute)
	var leading atomic.Bool
	forwarded := make(chan struct{}, 16)
	justForwarded := false // the loop's goroutine's only
	d.SetGate(leading.Load, func() { justForwarded = true; forwarded <- struct{}{} })
	passed := make(chan struct{}, 16)
	d.pause = func(gap time.Duration) bool { // no wait; a pass's end is told
		if !justForwarded {
			passed <- struct{}{}
		}
		justForwarded = false
		select {
		case <-d.done:
			return false
		default:
			return true
		}
	}
	d.Start()
	defer d.Close()
	d.Kick()
	select {
	case <-forwarded:
	case <-time.After(10 * time.Second):
		t.Fatal("a kick on a replica that does not lead was not forwarded within 10 s")
	}
	leading.Store(true)
	d.Kick()
	select {
	case <-passed:
	case <-time.After(10 * time.Second):
		t.Fatal("a kick on the leader ran no pass within 10 s")
	}
	if n := len(forwarded); n != 0 {
		t.Fatalf("the leader forwarded %d kicks", n)
	}
}
