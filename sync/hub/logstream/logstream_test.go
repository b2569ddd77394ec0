package logstream

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/syncbuf"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// rig is a Streamer over a real fleet database whose requests reach a
// scripted device in this process: answer is called, on its own
// goroutine, with each request the device opens (signature checked), and
// send hands the device's frames to the Streamer as the link would.
type rig struct {
	fleet *fleetdb.Fleet
	s     *Streamer
	mu    sync.Mutex
	ops   []string // every request's op, in order
}

func newRig(t *testing.T, cfg Config, answer func(r *protocol.LogsRequest, send func(f protocol.LogsFrame, data string))) *rig {
	t.Helper()
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	for _, id := range []string{"gw-1", "gw-off"} {
		if err := fleet.AddDevice(id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := fleet.SavePresence("gw-1", &protocol.Presence{Device: "gw-1", Online: true}, time.Now()); err != nil {
		t.Fatal(err)
	}
	pub, key, _ := ed25519.GenerateKey(nil)
	r := &rig{fleet: fleet}
	cfg.Fleet, cfg.Key = fleet, key
	cfg.Publish = func(topic string, retained bool, payload []byte) {
		req, err := protocol.OpenLogsRequest(payload, "gw-1", pub, time.Now())
		if err != nil || retained || topic != (protocol.Topics{}).Device("gw-1", protocol.KindLogsRequest) {
			t.Errorf("a request the device refuses: %v (topic %s, retained %v)", err, topic, retained)
			return
		}
		r.mu.Lock()
		r.ops = append(r.ops, req.Op)
		r.mu.Unlock()
		if req.Op == protocol.LogsOpen {
			go answer(req, func(f protocol.LogsFrame, data string) {
				f.Request = req.ID
				msg, err := protocol.EncodeLogsFrame(f, []byte(data))
				if err != nil {
					t.Error(err)
				}
				r.s.Frame("gw-1", msg)
			})
		}
	}
	r.s = New(cfg)
	return r
}

func (r *rig) opsSeen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.ops...)
}

// status is err's StatusError code and message.
func status(t *testing.T, err error) (int32, string) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("%v (%T) is not a StatusError", err, err)
	}
	return se.ErrStatus.Code, se.ErrStatus.Message
}

func TestPodLogsInOrder(t *testing.T) {
	r := newRig(t, Config{}, func(req *protocol.LogsRequest, send func(protocol.LogsFrame, string)) {
		if req.Pod != "web" || req.Namespace != "default" || req.Options.Container != "app" || *req.Options.TailLines != 5 {
			t.Errorf("the device was asked %+v %+v", req, req.Options)
		}
		send(protocol.LogsFrame{Seq: 0}, "")
		send(protocol.LogsFrame{Seq: 1}, "one\n")
		send(protocol.LogsFrame{Seq: 1}, "one\n") // the broker sent it twice
		send(protocol.LogsFrame{Seq: 2, End: true}, "two\n")
	})
	tail := int64(5)
	var out bytes.Buffer
	if err := r.s.PodLogs(context.Background(), "gw-1", "default", "web", &v1.PodLogOptions{Container: "app", TailLines: &tail}, &out); err != nil {
		t.Fatal(err)
	}
	if out.String() != "one\ntwo\n" {
		t.Fatalf("wrote %q", out.String())
	}
	if ops := r.opsSeen(); len(ops) != 1 {
		t.Errorf("requests %v: a stream that ended needs no cancel", ops)
	}
}

func TestPodLogsRefusals(t *testing.T) {
	// Only the silent device needs the timer; 2 s is past any stall of
	// the scripted answers on a loaded machine.
	r := newRig(t, Config{Answer: 2 * time.Second}, func(req *protocol.LogsRequest, send func(protocol.LogsFrame, string)) {
		switch req.Pod {
		case "ghost":
			send(protocol.LogsFrame{Seq: 0, End: true, Error: `pods "ghost" not found`, Reason: protocol.LogsNotFound}, "")
		case "gappy":
			send(protocol.LogsFrame{Seq: 0}, "")
			send(protocol.LogsFrame{Seq: 2}, "lost one\n")
		case "silent":
		}
	})
	r.fleet.SavePresence("gw-off", &protocol.Presence{Device: "gw-off", Online: false}, time.Date(2026, 11, 29, 5, 0, 0, 0, time.UTC))
	for _, c := range []struct {
		device, pod string
		opts        *v1.PodLogOptions
		code        int32
		msg         string
	}{
		{"nope", "web", nil, 404, `nodes "nope" not found`},
		{"gw-off", "web", nil, 503, `device "gw-off" is offline (last seen 2026-11-29T05:00:00Z)`},
		{"gw-1", "ghost", nil, 404, `pods "ghost" not found`},
		{"gw-1", "gappy", nil, 500, "lost frames 1 to 1"},
		{"gw-1", "silent", nil, 504, `Timeout: device "gw-1" did not answer within 2s`},
		{"gw-1", "web", &v1.PodLogOptions{Container: "Bad_Name"}, 400, "options.container"},
	} {
		var out bytes.Buffer
		err := r.s.PodLogs(context.Background(), c.device, "default", c.pod, c.opts, &out)
		code, msg := status(t, err)
		if code != c.code || !strings.Contains(msg, c.msg) {
			t.Errorf("%s/%s: %d %q, want %d %q", c.device, c.pod, code, msg, c.code, c.msg)
		}
	}
}

// A follow stream is kept alive while read, cancelled when the reader
// goes, and ended when its device goes offline.
func TestPodLogsFollow(t *testing.T) {
	started := make(chan struct{}, 2)
	r := newRig(t, Config{KeepAlive: 20 * time.Millisecond}, func(req *protocol.LogsRequest, send func(protocol.LogsFrame, string)) {
		send(protocol.LogsFrame{Seq: 0}, "first\n")
		started <- struct{}{}
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	var out lockedBuffer
	go func() { done <- r.s.PodLogs(ctx, "gw-1", "default", "web", &v1.PodLogOptions{Follow: true}, &out) }()
	<-started
	deadline := time.Now().Add(10 * time.Second)
	for !contains(r.opsSeen(), protocol.LogsKeepAlive) {
		if time.Now().After(deadline) {
			t.Fatalf("no keep-alive within 10 s: %v", r.opsSeen())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ops := r.opsSeen(); ops[len(ops)-1] != protocol.LogsCancel || out.String() != "first\n" {
		t.Fatalf("requests %v, wrote %q: want a cancel last", ops, out.String())
	}

	// The device goes offline under a stream: 503 at the next check.
	go func() {
		done <- r.s.PodLogs(context.Background(), "gw-1", "default", "web", &v1.PodLogOptions{Follow: true}, &out)
	}()
	<-started
	r.fleet.SavePresence("gw-1", &protocol.Presence{Device: "gw-1", Online: false}, time.Now())
	if code, msg := status(t, <-done); code != 503 || !strings.Contains(msg, "is offline") {
		t.Fatalf("%d %q", code, msg)
	}
}

// A reader slower than its queue is cut off; the link never waits.
func TestPodLogsSlowReaderCut(t *testing.T) {
	writing, release := make(chan struct{}), make(chan struct{})
	sent := make(chan struct{})
	r := newRig(t, Config{Queue: 1}, func(req *protocol.LogsRequest, send func(protocol.LogsFrame, string)) {
		send(protocol.LogsFrame{Seq: 0}, "a\n")
		<-writing
		for i := int64(1); i <= 5; i++ {
			send(protocol.LogsFrame{Seq: i}, "more\n") // returns at once: Frame never blocks
		}
		close(sent)
	})
	w := &blockingWriter{writing: writing, release: release}
	done := make(chan error, 1)
	go func() {
		done <- r.s.PodLogs(context.Background(), "gw-1", "default", "web", &v1.PodLogOptions{Follow: true}, w)
	}()
	<-sent
	close(release)
	if code, msg := status(t, <-done); code != 500 || !strings.Contains(msg, "faster than it was read") {
		t.Fatalf("%d %q", code, msg)
	}
	if ops := r.opsSeen(); ops[len(ops)-1] != protocol.LogsCancel {
		t.Fatalf("requests %v: want a cancel last", ops)
	}
}

func TestPodLogsStreamBound(t *testing.T) {
	hold := make(chan struct{})
	defer close(hold)
	started := make(chan struct{}, 1)
	r := newRig(t, Config{MaxStreams: 1}, func(req *protocol.LogsRequest, send func(protocol.LogsFrame, string)) {
		send(protocol.LogsFrame{Seq: 0}, "")
		started <- struct{}{}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.s.PodLogs(ctx, "gw-1", "default", "web", &v1.PodLogOptions{Follow: true}, &lockedBuffer{})
	<-started
	code, msg := status(t, r.s.PodLogs(context.Background(), "gw-1", "default", "web", nil, &lockedBuffer{}))
	if code != 429 || !strings.Contains(msg, "too many log streams at the hub") {
		t.Fatalf("%d %q", code, msg)
	}
}

func TestPodLogsFramesRefused(t *testing.T) {
	r := newRig(t, Config{}, func(*protocol.LogsRequest, func(protocol.LogsFrame, string)) {})
	// Junk and frames of no stream are dropped without a panic or a block.
	r.s.Frame("gw-1", []byte("junk"))
	msg, _ := protocol.EncodeLogsFrame(protocol.LogsFrame{Request: "00112233445566778899aabbccddeeff", Seq: 0}, []byte("x"))
	r.s.Frame("gw-1", msg)
}

// lockedBuffer is a log the code under test writes while the test reads it.
type lockedBuffer = syncbuf.Buffer

// blockingWriter says when its first write begins, and holds it until
// release closes.
type blockingWriter struct {
	writing, release chan struct{}
	once             sync.Once
}

func (b *blockingWriter) Write(p []byte) (int, error) {
	b.once.Do(func() { close(b.writing) })
	<-b.release
	return len(p), nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
