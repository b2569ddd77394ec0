package shim

import (
	"fmt"
	"os"
	"strconv"
	"sync"
)

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
func RunLogger(args []string) int {
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
	wg.Wait()
	return 0
}
