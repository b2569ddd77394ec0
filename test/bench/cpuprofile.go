package main

import (
	"flag"
	"os"
	"runtime/pprof"
)

var benchCPUProfile = flag.String("cpuprofile", "", "save the bench process's CPU profile to this file (the in-process hub of the status throughput rows; go tool pprof)")

// startCPUProfile starts the bench's own CPU profile when asked; the
// returned func stops it.
func startCPUProfile() (func(), error) {
	if *benchCPUProfile == "" {
		return func() {}, nil
	}
	f, err := os.Create(*benchCPUProfile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
