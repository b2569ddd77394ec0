// Package listenserver is the TCP server that the listen-probe e2e tests
// and the bench run as a pod's process (their binary, started again with
// an environment variable naming the spec): it listens on
// 127.0.0.1:PORT after DELAY and writes the time listen() returned to
// STAMP; given CLOSEON, it closes the listener once that file exists and
// writes the close time to STAMP.closed.
package listenserver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// Run serves spec, "PORT DELAY STAMP [CLOSEON]", until the process is
// killed. It returns only an exit code for a failure: 2 for a bad spec,
// 1 if it cannot listen.
func Run(spec string) int {
	f := strings.Fields(spec)
	if len(f) != 3 && len(f) != 4 {
		fmt.Fprintf(os.Stderr, "listen server: spec %q, want PORT DELAY STAMP [CLOSEON]\n", spec)
		return 2
	}
	port, err := strconv.Atoi(f[0])
	delay, derr := time.ParseDuration(f[1])
	if err := errors.Join(err, derr); err != nil {
		fmt.Fprintln(os.Stderr, "listen server:", err)
		return 2
	}
	stamp := f[2]
	time.Sleep(delay)
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		fmt.Fprintln(os.Stderr, "listen server:", err)
		return 1
	}
	WriteStamp(stamp, time.Now())
	go AcceptAndClose(ln)
	if len(f) == 4 {
		for {
			if _, err := os.Stat(f[3]); err == nil {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		ln.Close()
		WriteStamp(stamp+".closed", time.Now())
	}
	// Not select{}: once the listener is closed and its accept loop has
	// returned, no goroutine is left, and the runtime would end the process
	// with "all goroutines are asleep" (exit 2): the pod would turn unready
	// by the exit, not by its probe.
	for {
		time.Sleep(time.Hour)
	}
}

// AcceptAndClose accepts connections on ln and closes them at once, until
// ln is closed: all a TCP probe asks of a server.
func AcceptAndClose(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Close()
	}
}

// WriteStamp writes a time (Unix ns) whole, through a rename: the test
// may look at any moment.
func WriteStamp(path string, at time.Time) {
	os.WriteFile(path+".tmp", []byte(strconv.FormatInt(at.UnixNano(), 10)), 0o644)
	os.Rename(path+".tmp", path)
}

// Pod is a process pod whose one container, app, runs binary as a server
// that reads its spec from the environment variable env (the listen
// server, or another the binary knows); more is the rest of the
// container's fields, as YAML lines at the container's indent.
func Pod(name, binary, env, spec, more string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: host
    command: [%q]
    env: [{name: %s, value: %q}]
`, name, binary, env, spec) + more
}
