//go:build profile

package main

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile writes a pprof CPU profile of the daemon to
// PODVISOR_CPUPROFILE until the returned stop runs. Only in builds with
// -tags profile: runtime/pprof costs 128 KiB of every device image.
func startCPUProfile() (stop func(), err error) {
	path := os.Getenv("PODVISOR_CPUPROFILE")
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("PODVISOR_CPUPROFILE: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("PODVISOR_CPUPROFILE: %w", err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
