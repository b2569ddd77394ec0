package uplink_test

import (
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/uplink"
)

// A device given two brokers moves to the other when the one it is on
// goes away, and back again, round the list.
func TestDeviceMovesBetweenBrokers(t *testing.T) {
	a := startBroker(t)
	b := &testBroker{t: t, addr: freeAddrTB(t)} // not started yet
	dev := startDevice(t, a.addr, t.TempDir(), func(c *uplink.Config) { c.Brokers = []string{"mqtt://" + b.addr} })
	connectedSince := func(after time.Time) func() bool {
		return func() bool { l, _ := dev.Connection(); return l.Connected && l.Since.After(after) }
	}
	waitUntil(t, 10*time.Second, "connected to the first broker", connectedSince(time.Time{}))

	b.start()
	t.Cleanup(func() { b.b.Close() })
	closed := time.Now()
	a.b.Close()
	waitUntil(t, 10*time.Second, "connected to the second broker after the first closed", connectedSince(closed))

	a.start()
	closed = time.Now()
	b.b.Close()
	waitUntil(t, 10*time.Second, "back on the first broker after the second closed", connectedSince(closed))
}

func waitUntil(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
