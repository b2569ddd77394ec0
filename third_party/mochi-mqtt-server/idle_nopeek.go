// SPDX-License-Identifier: MIT

//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package mqtt

import "syscall"

// canPeek: no waitReadable here; readers wait inside a read.
const canPeek = false

func waitReadable(syscall.RawConn) error { return nil }
