package chunks

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

const sha = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

// source allows one device one artifact of one order.
type source struct{ path string }

func (s source) Resolve(device string, order int64, h string) (string, int64, error) {
	if device != "d1" || order != 3 || h != sha {
		return "", 0, fmt.Errorf("%s: %w", h, ErrNotOrdered)
	}
	fi, err := os.Stat(s.path)
	if err != nil {
		return "", 0, err
	}
	return s.path, fi.Size(), nil
}

type sent struct {
	mu     sync.Mutex
	frames map[string][][]byte
	got    chan struct{}
}

func (s *sent) send(device string, frame []byte) {
	s.mu.Lock()
	s.frames[device] = append(s.frames[device], frame)
	s.mu.Unlock()
	s.got <- struct{}{}
}

// wait waits for n frames (the readers answer asynchronously).
func (s *sent) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-s.got:
		case <-time.After(10 * time.Second):
			t.Fatalf("waited 10s for the chunk server's %d answers", n)
		}
	}
}

func fetch(order int64, h string, off int64, n int) []byte {
	return protocol.Encode(&protocol.Fetch{Order: order, SHA256: h, Offset: off, Length: n})
}

func TestChunksOnlyOfTheCurrentOrder(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789"), 30000) // 300 000 bytes
	path := filepath.Join(t.TempDir(), "blob")
	os.WriteFile(path, data, 0o600)
	out := &sent{frames: map[string][][]byte{}, got: make(chan struct{}, 100)}
	s := New(Config{Rate: 1 << 30}, source{path}, out.send, slog.New(slog.DiscardHandler))
	defer s.Close()

	s.Fetch("d1", fetch(3, sha, 0, protocol.MaxChunkBytes))
	s.Fetch("d1", fetch(3, sha, 290000, protocol.MaxChunkBytes)) // the tail: shorter
	s.Fetch("d1", fetch(3, sha, 300000, 10))                     // past the end
	s.Fetch("d1", fetch(2, sha, 0, 10))                          // an older order
	s.Fetch("d2", fetch(3, sha, 0, 10))                          // another device's
	s.Fetch("d1", []byte(`{"schema":1,"order":3,"sha256":"x","offset":0,"length":10}`))
	out.wait(t, 6)
	byOffset := map[int64][]byte{}
	var refusals []string
	for _, dev := range []string{"d1", "d2"} {
		for _, f := range out.frames[dev] {
			c, body, err := protocol.DecodeChunk(f)
			if err != nil {
				t.Fatal(err)
			}
			if c.Error != "" {
				refusals = append(refusals, dev+": "+c.Error)
				continue
			}
			byOffset[c.Offset] = body
		}
	}
	if !bytes.Equal(byOffset[0], data[:protocol.MaxChunkBytes]) || !bytes.Equal(byOffset[290000], data[290000:]) {
		t.Fatalf("chunks: %d at 0, %d at 290000", len(byOffset[0]), len(byOffset[290000]))
	}
	all := strings.Join(refusals, "\n")
	for _, want := range []string{"past the artifact's 300000 bytes", "d1: " + sha + ": not an artifact", "d2: " + sha + ": not an artifact", "sha256 \"x\""} {
		if !strings.Contains(all, want) {
			t.Errorf("refusals lack %q:\n%s", want, all)
		}
	}
	if s.Sent() != int64(protocol.MaxChunkBytes+10000) {
		t.Errorf("sent %d bytes", s.Sent())
	}
}

func TestChunksRefusedOverTheRate(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blob")
	os.WriteFile(path, make([]byte, 1<<20), 0o600)
	out := &sent{frames: map[string][][]byte{}, got: make(chan struct{}, 100)}
	now := time.Unix(1000, 0) // a clock that does not move: no refill
	s := New(Config{Rate: 256 << 10, MaxWait: time.Millisecond, Now: func() time.Time { return now }}, source{path}, out.send, slog.New(slog.DiscardHandler))
	defer s.Close()
	// The burst is a second's worth: two chunks, then refused.
	for i := range 3 {
		s.Fetch("d1", fetch(3, sha, int64(i)*protocol.MaxChunkBytes, protocol.MaxChunkBytes))
	}
	out.wait(t, 3)
	var errs []string
	for _, f := range out.frames["d1"] {
		c, _, _ := protocol.DecodeChunk(f)
		if c.Error != "" {
			errs = append(errs, c.Error)
		}
	}
	if len(errs) != 1 || !strings.Contains(errs[0], "over the rate of 262144 bytes/s") {
		t.Fatalf("refusals %q, want one over the rate", errs)
	}
}

func TestBucket(t *testing.T) {
	t0 := time.Unix(0, 0)
	b := NewBucket(1000, 2000, t0)
	if w, ok := b.Reserve(2000, t0, 0); !ok || w != 0 {
		t.Fatalf("the burst: %v %v", w, ok)
	}
	if _, ok := b.Reserve(500, t0, 100*time.Millisecond); ok {
		t.Fatal("500 bytes at 1000/s taken within 100ms of an empty bucket")
	}
	if w, ok := b.Reserve(500, t0, time.Second); !ok || w != 500*time.Millisecond {
		t.Fatalf("500 bytes: wait %v %v, want 500ms", w, ok)
	}
	// A second later, the debt is paid and 500 more are saved.
	if w, ok := b.Reserve(500, t0.Add(time.Second), 0); !ok || w != 0 {
		t.Fatalf("after a second: wait %v %v", w, ok)
	}
}

// A device flooding bad fetches gets a burst of refusals, then none
// until its refusal budget refills.
func TestRefusalsAreBounded(t *testing.T) {
	out := &sent{frames: map[string][][]byte{}, got: make(chan struct{}, 100)}
	now := time.Unix(1000, 0)
	s := New(Config{Now: func() time.Time { return now }}, source{"/nonexistent"}, out.send, slog.New(slog.DiscardHandler))
	defer s.Close()
	for range 100 {
		s.Fetch("d2", fetch(3, sha, 0, 10))
	}
	if n := len(out.frames["d2"]); n != 32 {
		t.Fatalf("%d refusals answered of 100 at once, want the burst of 32", n)
	}
	now = now.Add(time.Second)
	s.Fetch("d2", fetch(3, sha, 0, 10))
	if n := len(out.frames["d2"]); n != 33 {
		t.Fatalf("a second later, %d refusals answered, want one more", n)
	}
}

// The rate is in bytes, but each fetch costs the hub a file read and a
// message whatever its length: tiny fetches are charged at least
// MinFetchCost, so a device's credentials cannot buy thousands of
// answers a second with one-byte requests (Mosquitto bounds no client's
// message rate).
func TestTinyFetchesAreChargedAMinimum(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blob")
	os.WriteFile(path, make([]byte, 1<<20), 0o600)
	out := &sent{frames: map[string][][]byte{}, got: make(chan struct{}, 100)}
	now := time.Unix(1000, 0) // a clock that does not move: no refill
	const rate = 256 << 10
	s := New(Config{Rate: rate, MaxWait: time.Millisecond, Now: func() time.Time { return now }}, source{path}, out.send, slog.New(slog.DiscardHandler))
	defer s.Close()
	for i := range 40 {
		s.Fetch("d1", fetch(3, sha, int64(i), 1))
		out.wait(t, 1) // one at a time: never over MaxPending
	}
	answered := 0
	for _, f := range out.frames["d1"] {
		if c, _, _ := protocol.DecodeChunk(f); c.Error == "" {
			answered++
		}
	}
	if want := rate / MinFetchCost; answered != want {
		t.Fatalf("%d one-byte fetches answered within a burst of %d bytes, want %d (each charged %d)", answered, rate, want, MinFetchCost)
	}
}
