package shim

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// loggerDrainTimeout bounds how long the log driver keeps draining after
// containerd's shim asked it to stop (SIGTERM); the shim kills it at 12 s.
const loggerDrainTimeout = 10 * time.Second

// LoggerArgs are the arguments of the log driver mode: containerd's shim
// runs "podvisor-shim log-path P log-max-bytes N log-max-files N" for a
// task created with a binary:// log URI. The pairs come in any order (the
// shim builds them from a URL query, a map).
const (
	LoggerPath     = "log-path"
	LoggerMaxBytes = "log-max-bytes"
	LoggerMaxFiles = "log-max-files"
)

// IsLogger reports whether args (without the program name) ask for the
// log driver mode.
func IsLogger(args []string) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == LoggerPath {
			return true
		}
	}
	return false
}

// RunLogger is the body of the log driver mode. containerd's shim hands it
// the container's stdout and stderr as fds 3 and 4 and waits until fd 5 is
// closed; it writes both streams to one CRI-format log with size rotation
// and exits when the container has closed them. It outlives podvisor, as
// the container does, so no output is lost while the daemon restarts.
//
// containerd's shim keeps the write ends of the streams open until the
// task is deleted, then closes them and sends SIGTERM at once: the driver
// must not die of that signal before it has read to EOF, or the output
// still in the pipes, and a last line without a newline (written only at
// EOF, as a partial record), is lost.
func RunLogger(args []string) int {
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM, syscall.SIGINT)
	var path string
	var maxBytes int64
	maxFiles := 1
	for i := 0; i+1 < len(args); i += 2 {
		var err error
		switch args[i] {
		case LoggerPath:
			path = args[i+1]
		case LoggerMaxBytes:
			maxBytes, err = strconv.ParseInt(args[i+1], 10, 64)
		case LoggerMaxFiles:
			maxFiles, err = strconv.Atoi(args[i+1])
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "podvisor-shim log driver: %s: %v\n", args[i], err)
			return 2
		}
	}
	if path == "" {
		fmt.Fprintln(os.Stderr, "podvisor-shim log driver: no "+LoggerPath)
		return 2
	}
	stdout, stderr, ready := os.NewFile(3, "stdout"), os.NewFile(4, "stderr"), os.NewFile(5, "ready")
	logs, err := openLog(path, maxBytes, maxFiles)
	if err != nil {
		fmt.Fprintf(os.Stderr, "podvisor-shim log driver: %v\n", err)
		return 1
	}
	defer logs.close()
	ready.Close() // the task may start now
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); logs.copyStream("stdout", stdout) }()
	go func() { defer wg.Done(); logs.copyStream("stderr", stderr) }()
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-terms:
		select {
		case <-drained:
		case <-time.After(loggerDrainTimeout):
			fmt.Fprintln(os.Stderr, "podvisor-shim log driver: streams still open 10s after SIGTERM; stopping")
		}
	}
	return 0
}
