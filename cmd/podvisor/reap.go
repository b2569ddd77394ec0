package main

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
)

// A daemon that executed another version in its own process (the
// self-update's restart, or the rollback from a version on trial) keeps
// the children the previous one started: its keeper, the containerd
// plugin, a pod's init, a probe under way. Nothing in the new program
// waits for them, so each would stay a zombie once it exits, for as long
// as the daemon runs: after every update, the older version's keeper,
// drained, exits with its last container and stays. The process runtime
// already reaps the per-container shims it adopts as its own children;
// this reaps every other one.

// reapInherited reaps, as each one exits, the children this process had
// when it started: call it before the daemon starts a child of its own.
// A fresh start has none, and it costs one scan of /proc.
func reapInherited() {
	for _, pid := range childrenOf(os.Getpid()) {
		start, err := pidfd.StartTime(pid)
		if err != nil {
			continue
		}
		fd, err := pidfd.Open(pid, start)
		if err != nil {
			continue // gone already
		}
		go reapWhenExited(pid, fd)
	}
}

// reapWhenExited waits (in Go's netpoller, no thread held) until the
// process behind fd exits, then reaps exactly that process: the pidfd
// names it, whatever its pid becomes. Another waiter reaping it first
// (the process runtime for a shim) is fine: waitid then says ECHILD.
func reapWhenExited(pid, fd int) {
	defer unix.Close(fd)
	dup, err := unix.Dup(fd)
	if err != nil {
		return
	}
	if pidfd.Wait(dup) != nil {
		return
	}
	var info unix.Siginfo
	err = unix.Waitid(unix.P_PIDFD, fd, &info, unix.WEXITED|unix.WNOHANG, nil)
	if errors.Is(err, unix.EINVAL) {
		// P_PIDFD is Linux 5.4; pidfd_open 5.3. The child is a zombie
		// not yet reaped, so its pid is still its own.
		var ws unix.WaitStatus
		unix.Wait4(pid, &ws, unix.WNOHANG, nil)
	}
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	want := strconv.Itoa(pid)
	var out []int
	for _, path := range stats {
		data, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		// The state and the parent follow the command name, which ends
		// at the last ')' (a command may hold spaces and parentheses).
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(data[i+1:])); len(f) > 1 && f[1] == want {
			if child, err := strconv.Atoi(filepath.Base(filepath.Dir(path))); err == nil {
				out = append(out, child)
			}
		}
	}
	return out
}
