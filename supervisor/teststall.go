//go:build podvisor_teststall

package supervisor

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// TestStall is how long SIGUSR2 blocks the loop in a test build: far
// beyond any WatchdogSec a test sets, so only the watchdog ends it.
const TestStall = 10 * time.Minute

// armTestStall makes SIGUSR2 block the loop goroutine itself (not a side
// goroutine): its pings stop, as they would in a wedged loop, and the
// watchdog test under real systemd (test/vm/systemd-check.sh) sees
// systemd end and restart the daemon. Only in builds with -tags
// podvisor_teststall; release builds have no such signal.
func (d *Daemon) armTestStall(ctx context.Context) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGUSR2)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-ctx.Done():
				return
			case <-sig:
				d.log.Warn("test build: SIGUSR2 stalls the loop", "for", TestStall)
				d.inbox.do(func() error { time.Sleep(TestStall); return nil })
			}
		}
	}()
}
