package main

import (
	"errors"
	"flag"
	"os"
	"runtime/pprof"
)

var benchCPUProfile = flag.String("cpuprofile", "", "save the bench process's CPU profile to this file (the in-process hub of the status throughput rows; go tool pprof)")

var devicesCPUProfile = flag.String("hub-devices-cpu-profile", "", "save the bench process's CPU profile from podhub apply to the last ack stored (the simulated devices' side; not with -cpuprofile)")

// startDevicesProfile starts the bench's own CPU profile of the apply
// when asked; the returned func stops it.
func startDevicesProfile() (func(), error) {
	if *devicesCPUProfile != "" && *benchCPUProfile != "" {
		return nil, errors.New("-hub-devices-cpu-profile and -cpuprofile are one CPU profile each: give one")
	}
	return startProfile(*devicesCPUProfile)
}

// startCPUProfile starts the bench's own CPU profile when asked; the
// returned func stops it.
func startCPUProfile() (func(), error) {
	return startProfile(*benchCPUProfile)
}

// startProfile profiles this process's CPU into file ("": none).
func startProfile(file string) (func(), error) {
	if file == "" {
		return func() {}, nil
	}
	f, err := os.Create(file)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
