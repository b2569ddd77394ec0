package shim

import (
	"bytes"
	"errors"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// copier copies the output of every container of a keeper to its log on
// one goroutine, waiting on all pipes with one epoll: a goroutine and a
// read buffer per stream would cost more than the rest of the keeper's
// per-container state (docs/footprint.md).
type copier struct {
	epfd int
	mu   sync.Mutex
	by   map[int32]*stream // by pipe descriptor
	buf  []byte
}

// stream is one container output pipe.
type stream struct {
	fd    int
	name  string // stdout or stderr
	logs  *logWriter
	carry []byte // the start of a line not ended yet
	done  func()
}

func newCopier() (*copier, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, err
	}
	c := &copier{epfd: epfd, by: map[int32]*stream{}, buf: make([]byte, 32<<10)}
	go c.loop()
	return c, nil
}

// add copies the pipe r to logs as stream name until every writer has
// closed it, then calls done. It takes r's descriptor over.
func (c *copier) add(r *os.File, name string, logs *logWriter, done func()) error {
	fd, err := unix.Dup(int(r.Fd()))
	r.Close()
	if err != nil {
		return err
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return err
	}
	s := &stream{fd: fd, name: name, logs: logs, done: done}
	c.mu.Lock()
	c.by[int32(fd)] = s
	c.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(fd)}
	if err := unix.EpollCtl(c.epfd, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		c.mu.Lock()
		delete(c.by, int32(fd))
		c.mu.Unlock()
		unix.Close(fd)
		return err
	}
	return nil
}

// drop stops copying the streams of logs (their writers outlived the
// container: a descendant that escaped with a copy of the pipe).
func (c *copier) drop(logs *logWriter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for fd, s := range c.by {
		if s.logs == logs {
			c.closeLocked(fd, s)
		}
	}
}

func (c *copier) closeLocked(fd int32, s *stream) {
	unix.EpollCtl(c.epfd, unix.EPOLL_CTL_DEL, int(fd), nil)
	unix.Close(int(fd))
	delete(c.by, fd)
	s.done()
}

func (c *copier) loop() {
	events := make([]unix.EpollEvent, 32)
	for {
		n, err := unix.EpollWait(c.epfd, events, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			os.Stderr.WriteString("keeper: epoll: " + err.Error() + "\n")
			return
		}
		for _, ev := range events[:n] {
			c.readable(ev.Fd)
		}
	}
}

// readsPerTurn bounds what one pipe has copied before the others get
// their turn (epoll reports it again): a container that writes without a
// pause must not stall the other containers' logs, nor the forks and ends
// that wait for c.mu.
const readsPerTurn = 4

// readable copies what one pipe holds, up to readsPerTurn reads; at EOF
// it flushes and closes it.
func (c *copier) readable(fd int32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.by[fd]
	if s == nil {
		return // dropped meanwhile
	}
	for range readsPerTurn {
		n, err := unix.Read(int(fd), c.buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.EAGAIN) {
			return
		}
		if n <= 0 { // EOF: every writer is gone
			if len(s.carry) > 0 {
				s.logs.write(s.name, "P", s.carry)
			}
			c.closeLocked(fd, s)
			return
		}
		s.lines(c.buf[:n])
	}
}

// lines writes the complete lines of in, splitting at MaxLine as a
// MaxLine-sized line buffer would (copyStream), and keeps the rest.
func (s *stream) lines(in []byte) {
	if bytes.IndexByte(in, '\n') < 0 && len(s.carry)+len(in) < MaxLine {
		s.carry = append(s.carry, in...) // a line still arriving
		return
	}
	data, fromCarry := in, len(s.carry) > 0
	if fromCarry {
		s.carry = append(s.carry, in...)
		data = s.carry
	}
	for {
		i := bytes.IndexByte(data, '\n')
		if i < 0 {
			break
		}
		line := data[:i+1]
		for len(line) >= MaxLine && line[MaxLine-1] != '\n' {
			s.logs.write(s.name, "P", line[:MaxLine])
			line = line[MaxLine:]
		}
		s.logs.write(s.name, "F", line[:len(line)-1])
		data = data[i+1:]
	}
	for len(data) >= MaxLine {
		s.logs.write(s.name, "P", data[:MaxLine])
		data = data[MaxLine:]
	}
	switch {
	case len(data) == 0 && cap(s.carry) > 4<<10:
		s.carry = nil // a long line's memory goes back to the heap
	case fromCarry:
		s.carry = s.carry[:copy(s.carry, data)] // the rest, moved to the front
	default:
		s.carry = append(s.carry[:0], data...) // in is the copier's buffer
	}
}
