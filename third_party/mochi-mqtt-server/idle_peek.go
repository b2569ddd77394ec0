// SPDX-License-Identifier: MIT

//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package mqtt

import "syscall"

// canPeek: waitReadable works here.
const canPeek = true

// waitReadable parks until the socket has data to read (or EOF, an
// error, or the read deadline), reading nothing. It peeks before each
// wait: the runtime's poller is edge-triggered, so bytes that arrived
// before the wait began would not wake it, and a wake-up may find
// nothing to read.
func waitReadable(raw syscall.RawConn) error {
	return raw.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK)
		// Anything but "would block" (data, EOF, an error, even EINTR)
		// is for the read that follows to handle.
		return err != syscall.EAGAIN && err != syscall.EWOULDBLOCK
	})
}
