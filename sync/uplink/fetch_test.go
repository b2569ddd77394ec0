package uplink_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	hubbroker "github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
)

// transport is what the device's updater (firmware/agent) needs of the
// link; the agent must satisfy it.
type transport interface {
	Download(ctx context.Context, order int64, a protocol.Artifact, dest string, progress func(done int64)) error
	Report(s protocol.UpdateState)
}

var _ transport = (*uplink.Agent)(nil)

// testBroker is the embedded broker on a loopback port that a test may
// stop and start again at the same address.
type testBroker struct {
	t    testing.TB
	addr string
	b    *hubbroker.Broker
}

func startBroker(t testing.TB) *testBroker {
	t.Helper()
	tb := &testBroker{t: t, addr: freeAddrTB(t)}
	tb.start()
	t.Cleanup(func() { tb.b.Close() })
	return tb
}

func (tb *testBroker) start() {
	tb.t.Helper()
	b, err := hubbroker.Start(tb.addr, quiet())
	if err != nil {
		tb.t.Fatal(err)
	}
	tb.b = b
}

// startDevice runs an agent for gw-1 against addr until the test ends.
func startDevice(t testing.TB, addr, dir string, edit func(*uplink.Config)) *uplink.Agent {
	a, _ := startDeviceStop(t, addr, dir, edit)
	return a
}

// startDeviceStop is startDevice with a stop for a restart.
func startDeviceStop(t testing.TB, addr, dir string, edit func(*uplink.Config)) (*uplink.Agent, func()) {
	t.Helper()
	st, err := store.Open(filepath.Join(dir, "state.db"), store.DefaultLimits)
	if err != nil {
		t.Fatal(err)
	}
	cfg := uplink.Config{Broker: "mqtt://" + addr, DeviceID: "gw-1", AllowUnsigned: true,
		BackoffMin: 100 * time.Millisecond, BackoffMax: 300 * time.Millisecond, FetchTimeout: 2 * time.Second}
	if edit != nil {
		edit(&cfg)
	}
	a, err := uplink.New(cfg, st, newDaemon(nil), quiet())
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { a.Run(stop); close(done) }()
	var once sync.Once
	end := func() {
		once.Do(func() {
			close(stop)
			<-done
			st.Close()
		})
	}
	t.Cleanup(end)
	return a, end
}

// responder plays the hub's chunk server: it answers fetches from
// artifacts it holds, and answer may drop, change or hold an answer.
type responder struct {
	t       testing.TB
	client  mqtt.Client
	topics  protocol.Topics
	mu      sync.Mutex
	files   map[string][]byte // by sha256
	fetches []protocol.Fetch
	// answer decides on the n-th fetch (from 1): the chunk's header and
	// data as sent, or send=false to drop it.
	answer func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) (out []byte, send bool)
	seen   chan struct{} // poked at each fetch
}

func newResponder(t testing.TB, addr string, files ...[]byte) *responder {
	r := &responder{t: t, files: map[string][]byte{}, seen: make(chan struct{}, 1)}
	for _, f := range files {
		r.files[shaOf(f)] = f
	}
	r.connect(addr)
	return r
}

func (r *responder) connect(addr string) {
	r.t.Helper()
	r.client = mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("the-hub").
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true))
	if tok := r.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		r.t.Fatalf("the responder cannot connect to %s: %v", addr, tok.Error())
	}
	c := r.client
	r.t.Cleanup(func() { c.Disconnect(0) })
	tok := r.client.Subscribe(r.topics.Device("gw-1", protocol.KindFetch), 1, r.onFetch)
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		r.t.Fatalf("the responder subscribing: %v", tok.Error())
	}
}

func (r *responder) onFetch(c mqtt.Client, m mqtt.Message) {
	f, err := protocol.DecodeFetch(m.Payload())
	if err != nil {
		r.t.Errorf("a fetch the hub would refuse: %v", err)
		return
	}
	r.mu.Lock()
	r.fetches = append(r.fetches, *f)
	n := len(r.fetches)
	answer := r.answer
	file := r.files[f.SHA256]
	r.mu.Unlock()
	select {
	case r.seen <- struct{}{}:
	default:
	}
	ch := protocol.Chunk{Order: f.Order, SHA256: f.SHA256, Offset: f.Offset}
	var data []byte
	if file == nil || f.Offset+int64(f.Length) > int64(len(file)) {
		ch.Error = "no such artifact"
	} else {
		data = file[f.Offset : f.Offset+int64(f.Length)]
	}
	out := protocol.EncodeChunk(ch, data)
	if answer != nil {
		var send bool
		if out, send = answer(n, f, &ch, data); !send {
			return
		}
	}
	c.Publish(r.topics.Device("gw-1", protocol.KindChunk), 1, false, out)
}

func (r *responder) setAnswer(f func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) ([]byte, bool)) {
	r.mu.Lock()
	r.answer = f
	r.mu.Unlock()
}

func (r *responder) log() []protocol.Fetch {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]protocol.Fetch(nil), r.fetches...)
}

func freeAddrTB(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func shaOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func randomBytes(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

func artifactOf(b []byte) protocol.Artifact {
	return protocol.Artifact{Name: "podvisor", Arch: "amd64", Size: int64(len(b)), SHA256: shaOf(b)}
}

// download runs a Download bounded to 60 s; progress is recorded. It
// may run on a goroutine of its own.
func download(t testing.TB, a *uplink.Agent, ctx context.Context, order int64, art protocol.Artifact, dest string) (progress []int64, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	err = a.Download(ctx, order, art, dest, func(done int64) { progress = append(progress, done) })
	if errors.Is(err, context.DeadlineExceeded) {
		err = errors.New("the download did not end within 60s")
	}
	return progress, err
}

// A multi-chunk artifact arrives whole and in order over the broker;
// chunks nobody asked for (another order, an offset not requested) are
// refused without harm, an answer that comes twice is written once, and
// the hub's "ask again" is asked again.
func TestDownloadWhole(t *testing.T) {
	tb := startBroker(t)
	file := randomBytes(5*protocol.MaxChunkBytes+1234, 1)
	r := newResponder(t, tb.addr, file)
	r.setAnswer(func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) ([]byte, bool) {
		if n == 1 {
			topic := r.topics.Device("gw-1", protocol.KindChunk)
			junk := bytes.Repeat([]byte{0xAA}, f.Length)
			other := *c
			other.Order++
			r.client.Publish(topic, 1, false, protocol.EncodeChunk(other, junk))
			unasked := *c
			unasked.Offset = 7
			r.client.Publish(topic, 1, false, protocol.EncodeChunk(unasked, junk[:100]))
			r.client.Publish(topic, 1, false, protocol.EncodeChunk(*c, data)) // a duplicate
		}
		if n == 2 || n == 3 { // the hub is busy: asked again
			busy := *c
			busy.Error = "8 fetches under way: ask again when one is answered"
			return protocol.EncodeChunk(busy, nil), true
		}
		return protocol.EncodeChunk(*c, data), true
	})
	a := startDevice(t, tb.addr, t.TempDir(), nil)
	dest := filepath.Join(t.TempDir(), "podvisor.part")
	progress, err := download(t, a, context.Background(), 3, artifactOf(file), dest)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, file) {
		t.Fatalf("the file differs from the artifact (%d bytes, want %d)", len(got), len(file))
	}
	if progress[0] != 0 || progress[len(progress)-1] != int64(len(file)) {
		t.Fatalf("progress %v, want 0 to %d", progress, len(file))
	}
	for _, f := range r.log() {
		if f.Order != 3 || f.SHA256 != shaOf(file) || f.Length > protocol.MaxChunkBytes {
			t.Fatalf("fetch %+v", f)
		}
	}
	if n := len(r.log()); n < 8 {
		t.Fatalf("%d fetches for 6 chunks, 2 of them answered \"ask again\"", n)
	}
}

// A partial file is resumed from its size (not a chunk boundary); a lost
// answer is asked for again after the timeout; a file longer than the
// artifact starts over.
func TestDownloadResumeAndLostChunk(t *testing.T) {
	tb := startBroker(t)
	file := randomBytes(3*protocol.MaxChunkBytes+10, 2)
	r := newResponder(t, tb.addr, file)
	var lost atomic.Int64
	r.setAnswer(func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) ([]byte, bool) {
		if n == 1 {
			lost.Store(f.Offset) // the first answer is lost
			return nil, false
		}
		return protocol.EncodeChunk(*c, data), true
	})
	a := startDevice(t, tb.addr, t.TempDir(), func(c *uplink.Config) { c.FetchTimeout = 300 * time.Millisecond })
	dest := filepath.Join(t.TempDir(), "podvisor.part")
	const have = 200_001
	if err := os.WriteFile(dest, file[:have], 0o600); err != nil {
		t.Fatal(err)
	}
	progress, err := download(t, a, context.Background(), 1, artifactOf(file), dest)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, file) {
		t.Fatal("the resumed file differs from the artifact")
	}
	// Requests made before the connection are sent again at it, in any
	// order: the resume shows in the lowest offset asked for.
	log := r.log()
	lowest, asked := log[0].Offset, 0
	for _, f := range log {
		lowest = min(lowest, f.Offset)
		if f.Offset == lost.Load() {
			asked++
		}
	}
	if lowest != have || progress[0] != have {
		t.Fatalf("lowest fetch at %d, first progress %d: want the resume at %d", lowest, progress[0], have)
	}
	// Asked again after the timeout; a loaded machine may answer the
	// second ask past the next timeout too, and a third ask is right.
	if asked < 2 {
		t.Fatalf("the lost chunk at %d was asked for %d times, want it asked again (fetches %+v)", lost.Load(), asked, log)
	}
	// A file longer than the artifact is no prefix of it: started over.
	r.setAnswer(nil)
	if err := os.WriteFile(dest, append(append([]byte(nil), file...), "junk"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := download(t, a, context.Background(), 2, artifactOf(file), dest); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, file) {
		t.Fatal("a download over a longer file differs from the artifact")
	}
}

// A corrupted chunk: the whole fails its sha256 and nothing is kept; a
// chunk with the hub's error ends the download with it; a hub that never
// answers ends it after the tries.
func TestDownloadRefusals(t *testing.T) {
	tb := startBroker(t)
	file := randomBytes(2*protocol.MaxChunkBytes, 3)
	r := newResponder(t, tb.addr, file)
	a := startDevice(t, tb.addr, t.TempDir(), func(c *uplink.Config) {
		// Long enough for an answered chunk on a loaded machine; the
		// mute hub's case takes 0.5 + 1 + 2 s.
		c.FetchTimeout = 500 * time.Millisecond
		c.FetchTries = 3
	})
	dir := t.TempDir()

	r.setAnswer(func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) ([]byte, bool) {
		bad := append([]byte(nil), data...)
		if f.Offset == protocol.MaxChunkBytes {
			bad[17] ^= 1
		}
		return protocol.EncodeChunk(*c, bad), true
	})
	dest := filepath.Join(dir, "corrupt.part")
	if _, err := download(t, a, context.Background(), 1, artifactOf(file), dest); err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("a corrupted chunk: %v, want a sha256 mismatch", err)
	}
	if _, err := os.Stat(dest); !os.IsNotExist(err) {
		t.Fatalf("the corrupted download is left at %s: %v", dest, err)
	}

	r.setAnswer(func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) ([]byte, bool) {
		c.Error = "order 2 is withdrawn"
		return protocol.EncodeChunk(*c, nil), true
	})
	if _, err := download(t, a, context.Background(), 2, artifactOf(file), filepath.Join(dir, "err.part")); err == nil || !strings.Contains(err.Error(), "hub: order 2 is withdrawn") {
		t.Fatalf("the hub's error: %v", err)
	}

	r.setAnswer(func(int, *protocol.Fetch, *protocol.Chunk, []byte) ([]byte, bool) { return nil, false })
	if _, err := download(t, a, context.Background(), 3, artifactOf(file), filepath.Join(dir, "mute.part")); err == nil || !strings.Contains(err.Error(), "after 3 requests") {
		t.Fatalf("a hub that never answers: %v", err)
	}
}

// The link breaks mid-download (another client takes the device's
// session over, as a broker does to a stale connection): the requests
// outstanding, unanswered, are asked again at the reconnection and the
// download completes; a cancelled context ends a download at once.
func TestDownloadAcrossReconnectAndCancel(t *testing.T) {
	tb := startBroker(t)
	file := randomBytes(12*protocol.MaxChunkBytes, 4)
	r := newResponder(t, tb.addr, file)
	held := make(chan struct{})
	var holdOnce sync.Once
	r.setAnswer(func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) ([]byte, bool) {
		if n > 3 {
			holdOnce.Do(func() { close(held) })
			return nil, false
		}
		return protocol.EncodeChunk(*c, data), true
	})
	// FetchTimeout is long: only the reconnection can ask again in time.
	a := startDevice(t, tb.addr, t.TempDir(), func(c *uplink.Config) { c.FetchTimeout = time.Minute })
	dest := filepath.Join(t.TempDir(), "podvisor.part")
	errc := make(chan error, 1)
	go func() { _, err := download(t, a, context.Background(), 1, artifactOf(file), dest); errc <- err }()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("not within 20s: the fourth fetch")
	}
	before := len(r.log())
	r.setAnswer(nil) // answers again, but the requests held are lost
	// Not a clean session: mochi cleaning up a clean one after the
	// device took the session back would drop the device's new
	// subscriptions (a broker's takeover race the heartbeats catch, in
	// minutes, not what this test is about).
	impostor := mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + tb.addr).SetClientID("gw-1").
		SetCleanSession(false).SetAutoReconnect(false))
	if tok := impostor.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("taking the device's session over: %v", tok.Error())
	}
	impostor.Disconnect(0)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not within 30s: the download completing after the reconnection")
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, file) {
		t.Fatal("the file differs from the artifact")
	}
	if len(r.log()) <= before {
		t.Fatal("nothing asked after the reconnection")
	}
	r2 := r

	// Cancelled while the hub holds every answer.
	r2.setAnswer(func(int, *protocol.Fetch, *protocol.Chunk, []byte) ([]byte, bool) { return nil, false })
	select {
	case <-r2.seen: // a fetch of the download above
	default:
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-r2.seen
		cancel()
	}()
	start := time.Now()
	if _, err := download(t, a, ctx, 2, artifactOf(file), filepath.Join(t.TempDir(), "cancel.part")); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled download: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("the cancelled download took %v to end", d)
	}
}

// The broker restarts mid-download (it keeps nothing): the device
// reconnects, asks again for what is outstanding, and what the new
// broker lost before the hub was back is asked again after the timeout.
func TestDownloadAcrossBrokerRestart(t *testing.T) {
	tb := startBroker(t)
	file := randomBytes(8*protocol.MaxChunkBytes, 6)
	r := newResponder(t, tb.addr, file)
	held := make(chan struct{})
	var holdOnce sync.Once
	r.setAnswer(func(n int, f *protocol.Fetch, c *protocol.Chunk, data []byte) ([]byte, bool) {
		if n > 2 {
			holdOnce.Do(func() { close(held) })
			return nil, false
		}
		return protocol.EncodeChunk(*c, data), true
	})
	a := startDevice(t, tb.addr, t.TempDir(), func(c *uplink.Config) { c.FetchTimeout = 500 * time.Millisecond })
	dest := filepath.Join(t.TempDir(), "podvisor.part")
	errc := make(chan error, 1)
	go func() { _, err := download(t, a, context.Background(), 1, artifactOf(file), dest); errc <- err }()
	select {
	case <-held:
	case <-time.After(20 * time.Second):
		t.Fatal("not within 20s: the third fetch")
	}
	tb.b.Close()
	tb.start()
	r2 := newResponder(t, tb.addr, file)
	select {
	case err := <-errc:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("not within 30s: the download completing after the broker's restart")
	}
	if got, _ := os.ReadFile(dest); !bytes.Equal(got, file) {
		t.Fatal("the file differs from the artifact")
	}
	if len(r2.log()) == 0 {
		t.Fatal("nothing asked of the restarted broker")
	}
}

// BenchmarkDownload20MiB measures a 20 MiB artifact through the
// embedded broker on loopback, with the default window and chunk size:
//
//	go test ./sync/uplink -run '^$' -bench Download20MiB -benchtime 3x
func BenchmarkDownload20MiB(b *testing.B) {
	tb := startBroker(b)
	file := randomBytes(20<<20, 5)
	newResponder(b, tb.addr, file)
	a := startDevice(b, tb.addr, b.TempDir(), nil)
	dir := b.TempDir()
	b.SetBytes(int64(len(file)))
	b.ResetTimer()
	for i := range b.N {
		dest := filepath.Join(dir, "podvisor.part")
		os.Remove(dest)
		if _, err := download(b, a, context.Background(), int64(i+1), artifactOf(file), dest); err != nil {
			b.Fatal(err)
		}
	}
}
