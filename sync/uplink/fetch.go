package uplink

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"os"
	"strings"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
)

// Downloads in chunks over the broker: the device asks for parts of an
// artifact on its fetch topic, a few at a time, and the hub answers each
// on the device's chunk topic. Only the device keeps state: the hub
// answers requests, so a lost request or answer is asked again, and a
// broken link costs the requests outstanding, sent again at the next
// connection.

// Defaults of the transfer (Config.FetchWindow, FetchTimeout, FetchTries).
const (
	defaultFetchWindow  = 4
	defaultFetchTimeout = 10 * time.Second
	defaultFetchTries   = 6
	// syncEvery bounds what a power cut loses of a download: the file is
	// flushed to disk at least every syncEvery bytes.
	syncEvery = 4 << 20
)

// fetchKey names a download under way: a chunk names its order and the
// artifact's transfer hash.
type fetchKey struct {
	order int64
	sha   string
}

// chunkMsg is a decoded chunk; data aliases the MQTT payload.
type chunkMsg struct {
	c    *protocol.Chunk
	data []byte
}

// onChunk runs on paho's reader: it hands a chunk to the download it
// belongs to, never blocking (a full queue drops it, and the request
// times out and is asked again).
func (a *Agent) onChunk(_ mqtt.Client, m mqtt.Message) {
	c, data, err := protocol.DecodeChunk(m.Payload())
	if err != nil {
		a.refuseChunk(m.Topic(), err)
		return
	}
	a.mu.Lock()
	ch := a.downloads[fetchKey{c.Order, c.SHA256}]
	a.mu.Unlock()
	if ch == nil {
		a.refuseChunk(m.Topic(), fmt.Errorf("chunk of order %d, artifact %.12s at %d: no such download under way", c.Order, c.SHA256, c.Offset))
		return
	}
	select {
	case ch <- chunkMsg{c, data}:
	default:
	}
}

func (a *Agent) refuseChunk(topic string, err error) {
	log, suppressed := a.refusedChunks.Note()
	if suppressed > 0 {
		a.log.Warn("refused more chunks", "topic", topic, "count", suppressed, "total", a.refusedChunks.Total())
	}
	if log {
		a.log.Warn("refused a chunk", "topic", topic, "err", err)
	}
}

// link is the hub link as downloads see it: up once the connection's
// subscriptions are in place, the connection's number, and a channel
// closed at the next connection.
func (a *Agent) link() (up bool, seq uint64, next <-chan struct{}) {
	up, seq, next, _ = a.linkClient()
	return
}

// linkClient is link with the connection's client: one that is up, never
// one still connecting (paho races with itself resending what was
// published while it connected).
func (a *Agent) linkClient() (up bool, seq uint64, next <-chan struct{}, c mqtt.Client) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.connected, a.connSeq, a.connWake, a.client
}

// Download writes the transfer bytes of artifact art of order (encoded
// ones when it travels encoded: Artifact.Transfer) to dest, asking the
// hub for them in chunks. A partial dest is resumed from its size. It
// checks the size and sha256 of the whole at the end; on a mismatch dest
// is removed (nothing of it is trusted) and the error says so. progress,
// if not nil, is called with the bytes written so far. A chunk with an
// error from the hub ends the download with "hub: <error>".
func (a *Agent) Download(ctx context.Context, order int64, art protocol.Artifact, dest string, progress func(done int64)) error {
	sha, size := art.Transfer()
	if order < 1 {
		return fmt.Errorf("download %s: order %d, must be 1 or more", art.Name, order)
	}
	if _, err := hex.DecodeString(sha); err != nil || len(sha) != 64 || strings.ToLower(sha) != sha {
		return fmt.Errorf("download %s: sha256 %q is not 64 lower-case hex digits", art.Name, sha)
	}
	if size <= 0 || size > protocol.MaxArtifactBytes {
		return fmt.Errorf("download %s: size %d out of range", art.Name, size)
	}
	key := fetchKey{order, sha}
	ch := make(chan chunkMsg, 2*a.cfg.FetchWindow)
	a.mu.Lock()
	if a.downloads[key] != nil {
		a.mu.Unlock()
		return fmt.Errorf("download %s: already under way (order %d)", art.Name, order)
	}
	a.downloads[key] = ch
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		delete(a.downloads, key)
		a.mu.Unlock()
	}()

	f, err := os.OpenFile(dest, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("download %s: %w", art.Name, err)
	}
	defer f.Close()
	fx := &fetcher{a: a, name: art.Name, order: order, sha: sha, size: size, f: f, h: sha256.New(),
		ch: ch, progress: progress, pending: map[int64]*request{}, got: map[int64][]byte{}}
	if err := fx.resume(); err != nil {
		return fmt.Errorf("download %s: resuming %s: %w", art.Name, dest, err)
	}
	if err := fx.run(ctx); err != nil {
		return fmt.Errorf("download %s (order %d): %w", art.Name, order, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("download %s: %w", art.Name, err)
	}
	if got := hex.EncodeToString(fx.h.Sum(nil)); got != sha || fi.Size() != size {
		f.Close()
		os.Remove(dest)
		return fmt.Errorf("download %s (order %d): the %d bytes received (%d in the file) have sha256 %s, want %d bytes with sha256 %s; discarded",
			art.Name, order, fx.done, fi.Size(), got, size, sha)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("download %s: %w", art.Name, err)
	}
	return nil
}

// request is a Fetch outstanding.
type request struct {
	offset   int64
	length   int
	tries    int       // sent this many times, a reconnection's not counted
	conn     uint64    // the connection it was last sent on (0: not sent)
	deadline time.Time // for its answer (zero: not sent, waits for the link)
	// busy counts the hub's "ask again" answers; busyWait: the deadline
	// is when to ask again, not an answer's.
	busy     int
	busyWait bool
}

// fetcher is one download's state: requests go out in order, a window at
// a time; answers may come in any order and are written in order, so the
// file is always a prefix of the artifact (a resume starts at its size).
type fetcher struct {
	a        *Agent
	name     string
	order    int64
	sha      string
	size     int64
	f        *os.File
	h        hash.Hash // of the bytes written, in order
	ch       <-chan chunkMsg
	progress func(int64)

	next    int64 // the next offset to ask for
	done    int64 // bytes written (the file's size)
	synced  int64 // bytes flushed to disk
	pending map[int64]*request
	got     map[int64][]byte // answers ahead of done, at most a window
}

// resume hashes what dest already holds; a file longer than the artifact
// is no prefix of it and starts over.
func (fx *fetcher) resume() error {
	fi, err := fx.f.Stat()
	if err != nil {
		return err
	}
	have := fi.Size()
	if have > fx.size {
		fx.a.log.Warn("a partial download is longer than the artifact; starting over", "artifact", fx.name, "have", have, "size", fx.size)
		if err := fx.f.Truncate(0); err != nil {
			return err
		}
		have = 0
	}
	if have > 0 {
		if _, err := io.Copy(fx.h, io.NewSectionReader(fx.f, 0, have)); err != nil {
			return err
		}
		fx.a.log.Info("resuming a download", "artifact", fx.name, "order", fx.order, "have", have, "size", fx.size)
	}
	fx.next, fx.done, fx.synced = have, have, have
	return nil
}

func (fx *fetcher) run(ctx context.Context) error {
	_, _, reconnected := fx.a.link()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	if fx.progress != nil {
		fx.progress(fx.done)
	}
	fx.fill()
	for fx.done < fx.size {
		fx.arm(timer)
		select {
		case <-ctx.Done():
			fx.f.Sync() // what is written is kept for a resume
			return ctx.Err()
		case <-reconnected:
			// Requests sent on an earlier connection may be lost with it
			// (a new client; the answer may have come while none was
			// subscribed): ask again, not counted as tries.
			var seq uint64
			_, seq, reconnected = fx.a.link()
			for _, r := range fx.pending {
				if r.conn != seq {
					fx.send(r, fx.a.cfg.FetchTimeout, false)
				}
			}
		case <-timer.C:
			if err := fx.timeouts(); err != nil {
				return err
			}
		case m := <-fx.ch:
			if err := fx.take(m); err != nil {
				return err
			}
		}
	}
	return fx.f.Sync()
}

// fill asks for more while the window has room.
func (fx *fetcher) fill() {
	for len(fx.pending)+len(fx.got) < fx.a.cfg.FetchWindow && fx.next < fx.size {
		n := int(min(int64(protocol.MaxChunkBytes), fx.size-fx.next))
		r := &request{offset: fx.next, length: n}
		fx.pending[fx.next] = r
		fx.send(r, fx.a.cfg.FetchTimeout, false)
		fx.next += int64(n)
	}
}

// send publishes a request, to be answered within wait, without waiting
// for the broker: an answer, or its absence, is what counts. While the
// link is down nothing is sent; the next connection sends it. Only a
// first send and a retry after a timeout count as tries.
func (fx *fetcher) send(r *request, wait time.Duration, retry bool) {
	a := fx.a
	up, seq, _, c := a.linkClient()
	if !up {
		r.conn, r.deadline = 0, time.Time{}
		return
	}
	r.conn, r.deadline = seq, time.Now().Add(wait)
	if retry || r.tries == 0 {
		r.tries++
	}
	c.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindFetch), 1, false,
		protocol.Encode(&protocol.Fetch{Order: fx.order, SHA256: fx.sha, Offset: r.offset, Length: r.length}))
}

// arm sets the timer to the earliest deadline outstanding.
func (fx *fetcher) arm(t *time.Timer) {
	var first time.Time
	for _, r := range fx.pending {
		if r.deadline.IsZero() {
			continue // waits for the link
		}
		if first.IsZero() || r.deadline.Before(first) {
			first = r.deadline
		}
	}
	if first.IsZero() {
		t.Stop()
		return
	}
	t.Reset(time.Until(first))
}

// timeouts asks again for the parts not answered in time, waiting twice
// as long each time; after FetchTries the download fails. A request sent
// on an earlier connection is not counted: the reconnection asks again,
// and while the link is down no timer runs (a download waits for the
// link, or for its context).
func (fx *fetcher) timeouts() error {
	cfg := fx.a.cfg
	now := time.Now()
	up, seq, _ := fx.a.link()
	for _, r := range fx.pending {
		if r.deadline.IsZero() || r.deadline.After(now) {
			continue
		}
		if !up || r.conn != seq {
			r.deadline = time.Time{}
			continue
		}
		if r.busyWait {
			r.busyWait = false
			fx.send(r, cfg.FetchTimeout, false)
			continue
		}
		if r.tries >= cfg.FetchTries {
			return fmt.Errorf("no answer from the hub for bytes %d-%d after %d requests", r.offset, r.offset+int64(r.length), r.tries)
		}
		fx.a.log.Debug("asking again for a chunk", "artifact", fx.name, "offset", r.offset, "try", r.tries+1)
		fx.send(r, min(cfg.FetchTimeout<<r.tries, 8*cfg.FetchTimeout), true)
	}
	return nil
}

// take checks an answer and writes what is in order. An error from the
// hub ends the download, unless it says to ask again (a refusal the hub
// calls transient: over the device's rate, its queue full).
func (fx *fetcher) take(m chunkMsg) error {
	c := m.c
	r, ok := fx.pending[c.Offset]
	if c.Error != "" {
		if !strings.Contains(c.Error, "ask again") {
			return fmt.Errorf("hub: %s", c.Error)
		}
		// The hub is busy (over the device's rate, its queue full):
		// asked again later, not counted as a try, but not forever.
		if !ok || r.busyWait {
			return nil // of a request asked again since
		}
		r.busy++
		if r.busy > 4*fx.a.cfg.FetchTries {
			return fmt.Errorf("hub: %s (%d times for bytes %d-%d)", c.Error, r.busy, r.offset, r.offset+int64(r.length))
		}
		r.busyWait = true
		r.deadline = time.Now().Add(min(fx.a.cfg.FetchTimeout/10<<(r.busy-1), 8*fx.a.cfg.FetchTimeout))
		return nil
	}
	switch {
	case !ok && (c.Offset < fx.done || fx.got[c.Offset] != nil):
		return nil // a duplicate (an answer to a request asked again)
	case !ok:
		fx.a.refuseChunk(fx.a.topics.Device(fx.a.cfg.DeviceID, protocol.KindChunk),
			fmt.Errorf("chunk of %s at offset %d: not asked for", fx.name, c.Offset))
		return nil
	case len(m.data) != r.length:
		fx.a.refuseChunk(fx.a.topics.Device(fx.a.cfg.DeviceID, protocol.KindChunk),
			fmt.Errorf("chunk of %s at offset %d: %d bytes, asked for %d", fx.name, c.Offset, len(m.data), r.length))
		return nil // asked again at the timeout
	}
	delete(fx.pending, c.Offset)
	fx.got[c.Offset] = m.data
	for {
		data, ok := fx.got[fx.done]
		if !ok {
			break
		}
		delete(fx.got, fx.done)
		if _, err := fx.f.WriteAt(data, fx.done); err != nil {
			return err
		}
		fx.h.Write(data)
		fx.done += int64(len(data))
	}
	if fx.done-fx.synced >= syncEvery {
		if err := fx.f.Sync(); err != nil {
			return err
		}
		fx.synced = fx.done
	}
	if fx.progress != nil {
		fx.progress(fx.done)
	}
	fx.fill()
	return nil
}
