//go:build podvisor_teststall

package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"
)

const (
	// TestStall is how long SIGUSR2 blocks the loop in a test build: far
	// beyond any watchdog period, so only the watchdog ends it.
	TestStall = 10 * time.Minute
	// StallWatchdog is the watchdog period the stalling loop asks systemd
	// for (WATCHDOG_USEC=), so that a test waits seconds for the
	// watchdog, not the unit's WatchdogSec.
	StallWatchdog = 8 * time.Second
)

// armTestStall makes SIGUSR2 block the loop goroutine itself (not a side
// goroutine): the loop takes the stall as one of its requests, sends its
// last ping with a shorter period, and blocks; no ping follows, as in a
// wedged loop, and the watchdog test under real systemd
// (test/vm/systemd-check.sh) sees systemd end and restart the daemon.
// Only in builds with -tags podvisor_teststall; release builds have no
// such signal.
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
				d.inbox.do(func() error {
					if m := d.service; m.socket != nil {
						m.socket.Send(fmt.Sprintf("WATCHDOG=1\nWATCHDOG_USEC=%d", StallWatchdog.Microseconds()))
					}
					d.log.Warn("test build: SIGUSR2 stalls the loop", "for", TestStall, "watchdog", StallWatchdog)
					time.Sleep(TestStall)
					return nil
				})
			}
		}
	}()
}
