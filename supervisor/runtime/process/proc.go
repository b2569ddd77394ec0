package process

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// OpenPidfd returns a pidfd for pid if it is still the process that started
// at startTime; the pidfd then refers to that process even if pid is reused.
func OpenPidfd(pid int, startTime uint64) (int, error) {
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return -1, err
	}
	st, err := shim.ProcStartTime(pid)
	if err != nil || st != startTime {
		unix.Close(fd)
		return -1, unix.ESRCH
	}
	return fd, nil
}

// WaitPidfd blocks the calling goroutine, not a thread, until the process
// behind the pidfd exits: the pidfd turns readable and Go's netpoller
// wakes us. It takes ownership of fd.
func WaitPidfd(fd int) error {
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
