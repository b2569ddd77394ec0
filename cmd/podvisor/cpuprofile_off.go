//go:build !profile

package main

import (
	"fmt"
	"os"
)

// startCPUProfile only warns about PODVISOR_CPUPROFILE in release builds,
// which leave runtime/pprof out (128 KiB on arm64): a debugging variable
// left in a device's environment must not keep its pods from running.
func startCPUProfile() (stop func(), err error) {
	if os.Getenv("PODVISOR_CPUPROFILE") != "" {
		fmt.Fprintln(os.Stderr, "podvisor: PODVISOR_CPUPROFILE ignored: this build has no CPU profiler (build with -tags profile)")
	}
	return func() {}, nil
}
