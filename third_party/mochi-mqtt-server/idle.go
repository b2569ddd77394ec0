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
	"sync/atomic"
	"syscall"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// queuePacket queues a packet for the client, unless its queue is full,
// and makes sure a goroutine is writing the queue. The writer ends once
// the queue is empty, and the queue's memory goes with it: an idle
// client has neither a writer goroutine (and its stack) nor a queue of
// MaximumClientWritesPending slots.
func (cl *Client) queuePacket(pk *packets.Packet) bool {
	s := &cl.State
	s.outboundMu.Lock()
	if s.outbound == nil {
		s.outbound = make(chan *packets.Packet, cl.ops.options.Capabilities.MaximumClientWritesPending)
	}
	select {
	case s.outbound <- pk:
	default:
		s.outboundMu.Unlock()
		return false
	}
	atomic.AddInt32(&s.outboundQty, 1)
	start := !s.writing
	s.writing = true
	s.outboundMu.Unlock()
	if start {
		go cl.writeQueue()
	}
	return true
}

// writeQueue writes queued packets until the queue is empty or the
// client closes.
func (cl *Client) writeQueue() {
	for pk := cl.nextQueued(); pk != nil; pk = cl.nextQueued() {
		cl.writeQueued(pk)
	}
}

// nextQueued takes the next packet to write, or ends the writer: when the
// queue is empty (dropping it) or the client has closed (it then stays
// marked as writing, so that a closed client gets no new writer).
func (cl *Client) nextQueued() *packets.Packet {
	s := &cl.State
	s.outboundMu.Lock()
	defer s.outboundMu.Unlock()
	if cl.Closed() {
		return nil
	}
	select {
	case pk := <-s.outbound:
		return pk
	default:
	}
	s.writing = false
	s.outbound = nil
	return nil
}

// queued is the number of packets waiting in the client's queue.
func (s *ClientState) queued() int {
	s.outboundMu.Lock()
	defer s.outboundMu.Unlock()
	return len(s.outbound)
}

// isWriting reports whether a goroutine is writing the client's queue.
func (s *ClientState) isWriting() bool {
	s.outboundMu.Lock()
	defer s.outboundMu.Unlock()
	return s.writing
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
