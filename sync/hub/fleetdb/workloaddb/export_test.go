package workloaddb

import "time"

// SetLockTiming shortens the scheduling lock's liveness timing for a
// test, restoring it at cleanup.
func SetLockTiming(cleanup func(func()), beat, stuck, wait time.Duration) {
	b, s, w := lockBeat, stuckAfter, lockWait
	lockBeat, stuckAfter, lockWait = beat, stuck, wait
	cleanup(func() { lockBeat, stuckAfter, lockWait = b, s, w })
}
