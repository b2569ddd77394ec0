// Package pidfd names processes exactly, across pid reuse: a pid with its
// start time opens a pidfd, which the netpoller can wait on.
package pidfd

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Open returns a pidfd for pid if it is still the process that started
// at startTime; the pidfd then refers to that process even if pid is reused.
func Open(pid int, startTime uint64) (int, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return -1, err
	}
	st, err := StartTime(pid)
	if err != nil || st != startTime {
		unix.Close(fd)
		return -1, unix.ESRCH
	}
	return fd, nil
}

// Wait blocks the calling goroutine, not a thread, until the process
// behind the pidfd exits: the pidfd turns readable and Go's netpoller
// wakes us. It takes ownership of fd.
func Wait(fd int) error {
	f := os.NewFile(uintptr(fd), "pidfd")
	defer f.Close()
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var pollErr error
	err = rc.Read(func(fd uintptr) bool {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			return false
		}
		if err != nil {
			pollErr = err
			return true
		}
		return n > 0
	})
	if err != nil {
		return err
	}
	return pollErr
}

// StartTime returns a process's start time in clock ticks since boot,
// which with the pid identifies it across pid reuse.
func StartTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces and parentheses: fields start after
	// the last ')'. starttime is field 22, the 20th after it.
	s := string(data)
	end := strings.LastIndexByte(s, ')')
	if end < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 20 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields))
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

var bootIDOnce = sync.OnceValue(func() string {
	b, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
})

// BootID identifies the current boot: pids from another boot mean nothing.
func BootID() string { return bootIDOnce() }
