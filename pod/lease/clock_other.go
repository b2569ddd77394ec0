//go:build !linux

package lease

import "time"

// Now is the lease clock; off Linux, the monotonic clock.
func Now() time.Time { return time.Now() }
