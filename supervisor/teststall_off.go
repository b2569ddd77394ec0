//go:build !podvisor_teststall

package supervisor

import "context"

// armTestStall does nothing outside test builds (teststall.go).
func (d *Daemon) armTestStall(context.Context) {}
