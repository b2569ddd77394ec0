package lease

import (
	"time"

	"golang.org/x/sys/unix"
)

// Now is the device's lease clock: CLOCK_BOOTTIME, which runs on while
// the device is suspended (Go's monotonic clock does not: a lease timed
// on it would outlast a suspend the hub counted) and never steps with
// the wall clock. Its times compare only with each other, within one
// boot; they carry no monotonic reading of their own.
func Now() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts); err != nil {
		return time.Unix(0, time.Now().UnixNano()) // cannot happen on Linux ≥ 2.6.39
	}
	return time.Unix(ts.Unix())
}
