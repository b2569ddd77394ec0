// SPDX-License-Identifier: MIT
// podvisor: what a connected client costs while it is idle (PATCHES.md).

package mqtt

import (
	"bufio"
	"crypto/tls"
	"errors"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// startWriter makes sure a goroutine is writing the client's queued
// packets. The writer ends once the queue is empty, so an idle client has
// no writer goroutine (and no writer stack) at all.
func (cl *Client) startWriter() {
	if cl.State.writing.CompareAndSwap(false, true) {
		go cl.writeQueue()
	}
}

// writeQueue writes queued packets until the queue is empty or the
// client closes.
func (cl *Client) writeQueue() {
	for {
		select {
		case pk := <-cl.State.outbound:
			cl.writeQueued(pk)
			continue
		case <-cl.State.open.Done():
			// Still marked as writing: a closed client gets no new writer.
			return
		default:
		}
		cl.State.writing.Store(false)
		// A packet queued after the select found the queue empty, but
		// before the flag was cleared, saw a writer running and started
		// none: write it, unless a writer started since has it.
		if len(cl.State.outbound) == 0 || !cl.State.writing.CompareAndSwap(false, true) {
			return
		}
	}
}

// readWait is how a client's reader waits for its next packet without
// reading: on the socket itself, so that the goroutine parks in a few
// shallow frames and the runtime can shrink its stack to the minimum
// (parked inside crypto/tls's and bufio's reads it kept 8 KiB).
type readWait struct {
	raw syscall.RawConn
	// tls is set when raw is under a TLS connection, which may hold
	// bytes it has read from the socket but not yet returned.
	tls *tls.Conn
}

// newReadWait returns how to wait on c, or nil for connections whose
// socket it cannot reach or whose buffers it cannot see into (the
// reader then waits inside a read, as upstream mochi does).
func newReadWait(c net.Conn) *readWait {
	var w readWait
	if tc, ok := c.(*tls.Conn); ok {
		w.tls = tc
		c = tc.NetConn()
	}
	var sc syscall.Conn
	switch c := c.(type) {
	case *net.TCPConn:
		sc = c
	case *net.UnixConn:
		sc = c
	default:
		return nil
	}
	raw, err := sc.SyscallConn()
	if err != nil || !canPeek {
		return nil
	}
	w.raw = raw
	return &w
}

// expired is a read deadline in the past: a read with it returns at once.
var expired = time.Unix(1, 0)

// awaitPacket returns once the next packet's first byte has arrived
// (or the connection failed, or the keepalive deadline passed). While it
// waits, the client holds no read buffer.
func (cl *Client) awaitPacket() error {
	if cl.Net.bconn.Buffered() > 0 || cl.Net.wait == nil {
		cl.refreshDeadline(cl.State.Keepalive)
		_, err := cl.Net.bconn.Peek(1)
		return err
	}
	if cl.Net.wait.tls != nil {
		// Ask TLS for what it holds without blocking: with an expired
		// read deadline it returns buffered data or a timeout, which
		// leaves the connection intact (crypto/tls keeps a partial
		// record and fails only on errors that are not temporary).
		_ = cl.Net.Conn.SetReadDeadline(expired)
		_, err := cl.Net.bconn.Peek(1)
		cl.refreshDeadline(cl.State.Keepalive)
		if err == nil {
			return nil
		}
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			return err
		}
	} else {
		cl.refreshDeadline(cl.State.Keepalive)
	}
	cl.putReader()
	err := waitReadable(cl.Net.wait.raw)
	cl.getReader()
	return err
}

// readers holds the read buffers of clients waiting for a packet.
var readers sync.Pool

// putReader gives back the client's empty read buffer while it waits.
func (cl *Client) putReader() {
	readers.Put(cl.Net.bconn)
	cl.Net.bconn = nil
}

// getReader takes a read buffer for the client's next packet.
func (cl *Client) getReader() {
	size := cl.ops.options.ClientNetReadBufferSize
	if r, ok := readers.Get().(*bufio.Reader); ok && r.Size() == size {
		r.Reset(cl.Net.Conn)
		cl.Net.bconn = r
		return
	}
	cl.Net.bconn = bufio.NewReaderSize(cl.Net.Conn, size)
}
