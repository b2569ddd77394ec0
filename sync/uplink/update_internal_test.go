package uplink

import (
	"crypto/ed25519"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Progress within a phase goes out at most once per interval; the first
// report, a new phase, a new order and an order's end go out at once.
func TestReportGate(t *testing.T) {
	g := reportGate{every: 500 * time.Millisecond}
	t0 := time.Unix(1000, 0)
	st := func(order int64, phase string) *protocol.UpdateState {
		return &protocol.UpdateState{Order: order, Phase: phase}
	}
	steps := []struct {
		at    time.Duration
		s     *protocol.UpdateState
		wait  time.Duration
		sends bool
	}{
		{0, st(1, protocol.UpdateDownloading), 0, true},                                            // the first
		{100 * time.Millisecond, st(1, protocol.UpdateDownloading), 400 * time.Millisecond, false}, // progress: later
		{499 * time.Millisecond, st(1, protocol.UpdateDownloading), time.Millisecond, false},
		{500 * time.Millisecond, st(1, protocol.UpdateDownloading), 0, true}, // the interval is over
		{600 * time.Millisecond, st(1, protocol.UpdateVerifying), 0, true},   // a new phase
		{700 * time.Millisecond, st(2, protocol.UpdateVerifying), 0, true},   // a new order
		{800 * time.Millisecond, st(2, protocol.UpdateFailed), 0, true},
		{900 * time.Millisecond, st(2, protocol.UpdateFailed), 0, true}, // an end always goes out
	}
	for i, s := range steps {
		now := t0.Add(s.at)
		if w := g.wait(now, s.s); w != s.wait {
			t.Fatalf("step %d (%s at %v): wait %v, want %v", i, s.s.Phase, s.at, w, s.wait)
		}
		if s.sends {
			g.sent(now, s.s)
		}
	}
}

// Only a receipt of a heartbeat this run sent means the hub was reached.
func TestHubReachedOnlyByOwnBeat(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(nil)
	a := agent(t, t.TempDir(), pub)
	topic := protocol.Topics{}.Device("gw-1", protocol.KindStatusAck)
	ack := func(beat uint64) string { return string(protocol.Encode(&protocol.StatusAck{Epoch: "e", Beat: beat})) }
	sent := a.lease.beat(time.Now())
	a.onStatusAck(nil, message{topic, ack(sent + 7)})
	select {
	case <-a.HubReached():
		t.Fatal("a receipt of a heartbeat never sent reached the hub")
	default:
	}
	a.onStatusAck(nil, message{topic, ack(sent)})
	select {
	case <-a.HubReached():
	default:
		t.Fatal("the receipt of a sent heartbeat did not count")
	}
	a.onStatusAck(nil, message{topic, ack(sent)}) // again: no double close
}

// The order ID handed out is kept per hub key; a corrupt file is named.
func TestOrderIDFile(t *testing.T) {
	dir := t.TempDir()
	if err := saveOrderID(dir, "key-a", 42); err != nil {
		t.Fatal(err)
	}
	if n, err := loadOrderID(dir, "key-a"); err != nil || n != 42 {
		t.Fatalf("loaded %d %v, want 42", n, err)
	}
	if n, err := loadOrderID(dir, "key-b"); err != nil || n != 0 {
		t.Fatalf("another hub's key: %d %v, want 0", n, err)
	}
	os.WriteFile(filepath.Join(dir, orderFile), []byte("junk"), 0o600)
	if _, err := loadOrderID(dir, "key-a"); err == nil || !strings.Contains(err.Error(), orderFile) {
		t.Fatalf("a corrupt %s: %v", orderFile, err)
	}
	if got := clip("aé", 2); got != "a" {
		t.Fatalf("clip cut a character: %q", got)
	}
}
