// Package chunks is the hub's side of an artifact transfer over MQTT: it
// answers a device's fetch (part of an artifact, by transfer hash) with a
// chunk frame, only for an artifact of that device's current order, at
// most at the device's rate, with a bound on the reads under way, so
// that a device's credentials read nothing else and cannot wear the hub
// out.
package chunks

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Config bounds the transfers.
type Config struct {
	// Rate is each device's bytes per second (default DefaultRate); a
	// device may spend up to a second's worth (at least a chunk) at once.
	Rate int64
	// Reads bounds the artifact reads under way across the fleet
	// (default 4).
	Reads int
	// MaxWait is the longest a fetch waits for its device's rate before
	// it is refused (default 2 s).
	MaxWait time.Duration
	// MaxPending bounds the fetches of one device queued at once
	// (default 8).
	MaxPending int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// DefaultRate is a device's transfer rate unless podhub.yaml says
// otherwise: 4 MiB/s moves podvisor's arm64 release in about 3 s and
// keeps 50 devices under way within a gigabit link.
const DefaultRate = 4 << 20

// Source resolves a device's fetch to the file holding the bytes, or
// says why it is refused.
type Source interface {
	Resolve(device string, order int64, sha string) (path string, size int64, err error)
}

// Sender publishes a chunk frame on a device's chunk topic.
type Sender func(device string, frame []byte)

// Server answers fetches.
type Server struct {
	cfg  Config
	src  Source
	send Sender
	log  *slog.Logger
	work chan job
	bufs sync.Pool

	mu      sync.Mutex
	buckets map[string]*Bucket
	// refusals bounds each device's refusals (16 a second, 32 at once):
	// a device that floods bad fetches gets answers no faster, and the
	// rest are dropped (a device asks again after its timeout).
	refusals map[string]*Bucket
	pending  map[string]int
	closed   bool
	wg       sync.WaitGroup
	// Sent counts the bytes of artifacts sent.
	sent int64
}

type job struct {
	device string
	fetch  protocol.Fetch
	path   string
	size   int64
}

// New starts a server's readers.
func New(cfg Config, src Source, send Sender, log *slog.Logger) *Server {
	if cfg.Rate <= 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Reads <= 0 {
		cfg.Reads = 4
	}
	if cfg.MaxWait <= 0 {
		cfg.MaxWait = 2 * time.Second
	}
	if cfg.MaxPending <= 0 {
		cfg.MaxPending = 8
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{cfg: cfg, src: src, send: send, log: log, work: make(chan job, cfg.Reads),
		buckets: map[string]*Bucket{}, refusals: map[string]*Bucket{}, pending: map[string]int{}}
	s.bufs.New = func() any { b := make([]byte, protocol.MaxChunkBytes); return &b }
	for range cfg.Reads {
		s.wg.Add(1)
		go s.reader()
	}
	return s
}

// Close stops the readers; fetches still waiting are dropped (the
// device asks again).
func (s *Server) Close() {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.work)
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// Sent is the artifact bytes sent so far.
func (s *Server) Sent() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent
}

// Fetch handles a device's fetch message; it does not wait for the read.
func (s *Server) Fetch(device string, payload []byte) {
	f, err := protocol.DecodeFetch(payload)
	if err != nil {
		s.refuse(device, protocol.Fetch{}, err.Error())
		return
	}
	path, size, err := s.src.Resolve(device, f.Order, f.SHA256)
	if err != nil {
		s.refuse(device, *f, err.Error())
		return
	}
	if f.Offset >= size {
		s.refuse(device, *f, fmt.Sprintf("offset %d is past the artifact's %d bytes", f.Offset, size))
		return
	}
	n := int(min(int64(f.Length), size-f.Offset))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	if s.pending[device] >= s.cfg.MaxPending {
		s.mu.Unlock()
		s.refuse(device, *f, fmt.Sprintf("%d fetches under way: ask again when one is answered", s.cfg.MaxPending))
		return
	}
	b := s.buckets[device]
	if b == nil {
		b = NewBucket(float64(s.cfg.Rate), float64(max(s.cfg.Rate, protocol.MaxChunkBytes)), s.cfg.Now())
		s.buckets[device] = b
	}
	wait, ok := b.Reserve(max(n, MinFetchCost), s.cfg.Now(), s.cfg.MaxWait)
	if !ok {
		s.mu.Unlock()
		s.refuse(device, *f, fmt.Sprintf("over the rate of %d bytes/s: ask again later", s.cfg.Rate))
		return
	}
	s.pending[device]++
	s.mu.Unlock()
	j := job{device: device, fetch: *f, path: path, size: size}
	j.fetch.Length = n
	if wait <= 0 {
		s.enqueue(j)
		return
	}
	time.AfterFunc(wait, func() { s.enqueue(j) })
}

// enqueue hands a job to the readers (waiting for one: the jobs are
// bounded by MaxPending per device).
func (s *Server) enqueue(j job) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return
	}
	defer func() { recover() }() // closed meanwhile: dropped
	s.work <- j
}

func (s *Server) reader() {
	defer s.wg.Done()
	for j := range s.work {
		s.read(j)
	}
}

func (s *Server) read(j job) {
	defer func() {
		s.mu.Lock()
		if s.pending[j.device]--; s.pending[j.device] <= 0 {
			delete(s.pending, j.device)
		}
		s.mu.Unlock()
	}()
	bp := s.bufs.Get().(*[]byte)
	defer s.bufs.Put(bp)
	buf := (*bp)[:j.fetch.Length]
	f, err := os.Open(j.path)
	if err == nil {
		_, err = f.ReadAt(buf, j.fetch.Offset)
		f.Close()
	}
	if err != nil {
		s.log.Error("reading an artifact", "device", j.device, "sha256", j.fetch.SHA256, "err", err)
		s.refuse(j.device, j.fetch, "the hub could not read the artifact")
		return
	}
	s.mu.Lock()
	s.sent += int64(len(buf))
	s.mu.Unlock()
	s.send(j.device, protocol.EncodeChunk(protocol.Chunk{Order: j.fetch.Order, SHA256: j.fetch.SHA256, Offset: j.fetch.Offset}, buf))
}

// refuse answers a fetch with the reason (bounded: a chunk header is
// small).
func (s *Server) refuse(device string, f protocol.Fetch, reason string) {
	s.mu.Lock()
	b := s.refusals[device]
	if b == nil {
		b = NewBucket(16, 32, s.cfg.Now())
		s.refusals[device] = b
	}
	_, ok := b.Reserve(1, s.cfg.Now(), 0)
	s.mu.Unlock()
	if !ok {
		return
	}
	if len(reason) > 512 {
		reason = reason[:512]
	}
	s.send(device, protocol.EncodeChunk(protocol.Chunk{Order: f.Order, SHA256: f.SHA256, Offset: f.Offset, Error: reason}, nil))
}

// Bucket is a token bucket of bytes: Rate a second, up to Burst saved.
type Bucket struct {
	rate, burst, tokens float64
	last                time.Time
}

// NewBucket is a full bucket.
func NewBucket(rate, burst float64, now time.Time) *Bucket {
	return &Bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

// Reserve takes n bytes: it says how long to wait before sending them,
// or false (and takes nothing) when that would be over maxWait.
func (b *Bucket) Reserve(n int, now time.Time, maxWait time.Duration) (time.Duration, bool) {
	if now.After(b.last) {
		b.tokens = min(b.burst, b.tokens+now.Sub(b.last).Seconds()*b.rate)
		b.last = now
	}
	left := b.tokens - float64(n)
	var wait time.Duration
	if left < 0 {
		wait = time.Duration(-left / b.rate * float64(time.Second))
	}
	if wait > maxWait {
		return 0, false
	}
	b.tokens = left
	return wait, true
}

// MinFetchCost is what a fetch costs of its device's rate at least:
// each answer is a file read and a message, whatever its length.
const MinFetchCost = 32 << 10

// ErrNotOrdered is a fetch outside the device's current order.
var ErrNotOrdered = errors.New("not an artifact of this device's current order")
