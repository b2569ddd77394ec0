// Command leakcheck runs a test command and fails when the tests left
// anything behind: a process, a mount, a cgroup or a network namespace.
//
//	go run ./test/leakcheck -- go test -count=1 ./...
//
// It snapshots the host before the command and again after it, and reports
// what is new since the first snapshot and belongs to the tests, so what
// else runs on the machine is not counted. A new process belongs to the
// tests when it or an ancestor carries the run's token in its environment
// (it descends from the command); when it sits in a cgroup of the e2e
// harness named after one of the run's test binaries; or, once orphaned,
// when it is one of the project's or the tests' programs or runs from, in
// or rooted in a temporary directory. Mounts under a temporary directory or
// /run/podvisor, bound namespaces, entries of /run/netns and cgroups named
// podvisor* (but another run's harness cgroups) count when new. Leftovers
// are given up to -settle to go (processes killed at the end still
// exiting, lazy unmounts). With -shared (a machine where other tests run
// meanwhile), only what descends from the command, sits in its cgroups or
// lies in a temporary directory its processes used counts.
//
// The exit code is the command's when it failed, else 1 when something
// was left, else 0.
package main

import (
	"crypto/rand"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

// tokenVar names the environment variable that marks the run's processes.
const tokenVar = "PODVISOR_LEAKCHECK"

func main() {
	settle := flag.Duration("settle", 10*time.Second, "how long leftovers are given to go before they count")
	shared := flag.Bool("shared", false, "other tests run on the machine meanwhile: count what is in a temporary directory only where the run's processes worked, and processes only by their descent or the run's cgroups")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: leakcheck [-settle 10s] [-shared] -- command [args...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), *settle, *shared))
}

func run(command []string, settle time.Duration, shared bool) int {
	token := newToken()
	host := procHost{tempDirs: tempDirs(), self: os.Getpid()}
	before := host.snapshot(token)

	cmd := exec.Command(command[0], command[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), tokenVar+"="+token)
	// Ctrl-C reaches the command (same process group); leakcheck waits
	// for it and still reports. Caught, not ignored: an ignored signal
	// stays ignored in the command, and a shell cannot even trap it.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGINT)
	a := attribution{tempDirs: host.tempDirs, pids: map[int]bool{}, shared: shared, dirs: map[string]bool{}}
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() { // which processes are the run's, while they live
		defer close(sampled)
		for {
			procs := map[string]process{}
			host.readProcs(token, procs)
			for _, p := range procs {
				if p.tokened {
					a.pids[p.pid] = true
					usedDirs(p, a.tempDirs, a.dirs)
				}
			}
			select {
			case <-done:
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	code := 0
	err := cmd.Run()
	close(done)
	<-sampled
	if err != nil {
		code = 1
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() > 0 {
			code = ee.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "leakcheck: %s: %v\n", command[0], err)
	}

	var left []leak
	deadline := time.Now().Add(settle)
	for {
		left = leaks(before, host.snapshot(token), a)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(left) == 0 {
		fmt.Fprintln(os.Stderr, "leakcheck: nothing left behind")
		return code
	}
	sort.Slice(left, func(i, j int) bool { return left[i].String() < left[j].String() })
	fmt.Fprintf(os.Stderr, "leakcheck: the tests left %d things behind:\n", len(left))
	for _, l := range left {
		fmt.Fprintf(os.Stderr, "  %s\n", l)
	}
	if code == 0 {
		code = 1
	}
	return code
}

func newToken() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// tempDirs are where tests make their temporary files.
func tempDirs() []string {
	dirs := []string{"/tmp", "/var/tmp"}
	if t := os.TempDir(); t != "/tmp" && t != "/var/tmp" {
		dirs = append(dirs, t)
	}
	return dirs
}
