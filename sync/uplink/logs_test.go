package uplink_test

import (
	"context"
	"crypto/ed25519"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/uplink"
)

// fakeLogs serves "web" (its text, then, followed, nothing more until the
// stream ends) and refuses every other pod as the kubelet does.
type fakeLogs struct{ text string }

func (f fakeLogs) OpenLog(namespace, pod string, opts protocol.LogsOptions) (func(context.Context, io.Writer) error, error) {
	if pod != "web" {
		return nil, &protocol.LogsError{Reason: protocol.LogsNotFound, Message: fmt.Sprintf("pods %q not found", pod)}
	}
	return func(ctx context.Context, w io.Writer) error {
		if _, err := io.WriteString(w, f.text); err != nil {
			return err
		}
		if opts.Follow {
			w.(interface{ Flush() }).Flush()
			<-ctx.Done()
		}
		return nil
	}, nil
}

// logsHub plays the hub's side of the logs topics on the broker.
type logsHub struct {
	t      *testing.T
	client mqtt.Client
	key    ed25519.PrivateKey
	mu     sync.Mutex
	frames map[string][]protocol.LogsFrame
	data   map[string]string
	n      int
}

func connectLogsHub(t *testing.T, addr string, key ed25519.PrivateKey) *logsHub {
	t.Helper()
	h := &logsHub{t: t, key: key, frames: map[string][]protocol.LogsFrame{}, data: map[string]string{}}
	h.client = mqtt.NewClient(mqtt.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("the-logs-hub").
		SetCleanSession(true).SetAutoReconnect(false).SetOrderMatters(true))
	if tok := h.client.Connect(); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("the hub's client cannot connect to %s: %v", addr, tok.Error())
	}
	t.Cleanup(func() { h.client.Disconnect(0) })
	tok := h.client.Subscribe(protocol.Topics{}.Device("gw-1", protocol.KindLogs), 1, func(_ mqtt.Client, m mqtt.Message) {
		f, data, err := protocol.DecodeLogsFrame(m.Payload())
		if err != nil {
			t.Errorf("the device's frame: %v", err)
			return
		}
		h.mu.Lock()
		h.frames[f.Request] = append(h.frames[f.Request], *f)
		h.data[f.Request] += string(data)
		h.mu.Unlock()
	})
	if !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		t.Fatalf("subscribing: %v", tok.Error())
	}
	return h
}

// request publishes a signed request (key nil: the hub's) and returns it.
func (h *logsHub) request(op, id, pod string, opts *protocol.LogsOptions, key ed25519.PrivateKey, device string) []byte {
	h.t.Helper()
	if key == nil {
		key = h.key
	}
	if id == "" {
		h.mu.Lock()
		h.n++
		id = fmt.Sprintf("%032x", h.n)
		h.mu.Unlock()
	}
	now := time.Now()
	r := protocol.LogsRequest{Device: device, ID: id, Op: op, Sent: now, Expires: now.Add(time.Minute)}
	if op == protocol.LogsOpen {
		r.Namespace, r.Pod, r.Options = "default", pod, opts
	}
	msg, err := protocol.SignLogsRequest(r, key)
	if err != nil {
		h.t.Fatal(err)
	}
	h.publish(msg)
	return msg
}

func (h *logsHub) publish(msg []byte) {
	h.t.Helper()
	if tok := h.client.Publish(protocol.Topics{}.Device("gw-1", protocol.KindLogsRequest), 1, false, msg); !tok.WaitTimeout(10*time.Second) || tok.Error() != nil {
		h.t.Fatalf("publishing: %v", tok.Error())
	}
}

func (h *logsHub) stream(id string) ([]protocol.LogsFrame, string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]protocol.LogsFrame(nil), h.frames[id]...), h.data[id]
}

func (h *logsHub) ended(id string) bool {
	fs, _ := h.stream(id)
	return len(fs) > 0 && fs[len(fs)-1].End
}

// lastID is the ID request gave the newest open.
func (h *logsHub) lastID() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return fmt.Sprintf("%032x", h.n)
}

// settle publishes an open for a pod that does not exist and waits for
// its refusal: the device handles requests in order, so everything
// published before it has been handled.
func (h *logsHub) settle() {
	h.t.Helper()
	h.request(protocol.LogsOpen, "", "ghost", &protocol.LogsOptions{}, nil, "gw-1")
	id := h.lastID()
	eventually(h.t, "the refusal of "+id, func() bool { return h.ended(id) })
}

func logsDevice(t *testing.T, text string, edit func(*uplink.Config)) (*uplink.Agent, *logsHub) {
	pub, priv, _ := ed25519.GenerateKey(nil)
	tb := startBroker(t)
	h := connectLogsHub(t, tb.addr, priv)
	a := startDevice(t, tb.addr, t.TempDir(), func(c *uplink.Config) {
		c.HubKey, c.PodLogs = pub, fakeLogs{text}
		if edit != nil {
			edit(c)
		}
	})
	eventually(t, "the device connected", func() bool { l, _ := a.Connection(); return l.Connected })
	return a, h
}

func TestLogsStreamFramesAndLimit(t *testing.T) {
	text := strings.Repeat("0123456789abcdef", 3000) // 48,000 bytes: three frames
	_, h := logsDevice(t, text, nil)
	h.request(protocol.LogsOpen, "", "web", &protocol.LogsOptions{}, nil, "gw-1")
	id := h.lastID()
	eventually(t, "the stream's end", func() bool { return h.ended(id) })
	frames, data := h.stream(id)
	if data != text {
		t.Fatalf("streamed %d bytes, want %d", len(data), len(text))
	}
	for i, f := range frames {
		if f.Seq != int64(i) || f.Error != "" {
			t.Fatalf("frame %d: %+v", i, f)
		}
	}
	if len(frames) != 5 { // the found frame, three of data, the end
		t.Errorf("%d frames, want 5", len(frames))
	}
	limit := int64(20000)
	h.request(protocol.LogsOpen, "", "web", &protocol.LogsOptions{LimitBytes: &limit}, nil, "gw-1")
	id = h.lastID()
	eventually(t, "the limited stream's end", func() bool { return h.ended(id) })
	if _, data := h.stream(id); len(data) != 20000 {
		t.Fatalf("limitBytes 20000 streamed %d", len(data))
	}
	h.settle()
	frames, _ = h.stream(h.lastID())
	if len(frames) != 1 || frames[0].Reason != protocol.LogsNotFound || frames[0].Error != `pods "ghost" not found` {
		t.Fatalf("a missing pod: %+v", frames)
	}
}

// Forged, misdirected and replayed requests start nothing; over the bound
// a request is refused in one frame; a cancel or a lapsed keep-alive ends
// a stream and frees its place.
func TestLogsRequestsBounded(t *testing.T) {
	// A 3 s keep-alive, renewed every 200 ms: the test's own keep-alives
	// pass through its client and the broker, whose latency under load
	// is not what is tested.
	a, h := logsDevice(t, "line\n", func(c *uplink.Config) { c.LogStreams, c.LogKeepAlive = 2, 3*time.Second })
	follow := &protocol.LogsOptions{Follow: true}
	_, other, _ := ed25519.GenerateKey(nil)
	h.request(protocol.LogsOpen, "", "web", follow, other, "gw-1")
	forged := h.lastID()
	h.request(protocol.LogsOpen, "", "web", follow, nil, "gw-2")
	misdirected := h.lastID()
	h.publish([]byte(`{"schema":1,"doc":"e30=","signature":"AAAA"}`))
	first := h.request(protocol.LogsOpen, "", "web", follow, nil, "gw-1")
	firstID := h.lastID()
	// Keep-alives hold the first stream from here on.
	stop := make(chan struct{})
	var kept sync.WaitGroup
	kept.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				h.request(protocol.LogsKeepAlive, firstID, "", nil, nil, "gw-1")
			}
		}
	})
	h.publish(first) // a replay
	h.settle()
	for _, id := range []string{forged, misdirected} {
		if fs, _ := h.stream(id); len(fs) > 0 {
			t.Errorf("request %s was answered: %+v", id, fs)
		}
	}
	// The first stream's frames come from its own goroutine, and the
	// settling probe's stream is counted until its goroutine ends: wait
	// for both before counting.
	found := func() int {
		n := 0
		fs, _ := h.stream(firstID)
		for _, f := range fs {
			if f.Seq == 0 {
				n++
			}
		}
		return n
	}
	eventually(t, "the first stream's found frame and one stream left", func() bool { return found() >= 1 && a.LogStreams() == 1 })
	if n := found(); n != 1 {
		t.Errorf("the request and its replay: %d found frames, want 1", n)
	}

	// The bound refuses a third.
	h.request(protocol.LogsOpen, "", "web", follow, nil, "gw-1")
	second := h.lastID()
	h.request(protocol.LogsOpen, "", "web", follow, nil, "gw-1")
	third := h.lastID()
	eventually(t, "the third refused", func() bool { return h.ended(third) })
	if fs, _ := h.stream(third); fs[0].Reason != protocol.LogsTooManyRequests || !strings.Contains(fs[0].Error, "too many log streams") {
		t.Fatalf("over the bound: %+v", fs)
	}
	// The second, never kept alive, lapses; the first, kept, stays.
	eventually(t, "the unkept stream lapsing", func() bool { return a.LogStreams() == 1 })
	if h.ended(second) {
		t.Error("a lapsed stream sent an end: nobody reads it")
	}
	close(stop)
	kept.Wait()
	h.request(protocol.LogsCancel, firstID, "", nil, nil, "gw-1")
	eventually(t, "the cancelled stream gone", func() bool { return a.LogStreams() == 0 })
}

func TestLogsRate(t *testing.T) {
	text := strings.Repeat("x", 48<<10)
	_, h := logsDevice(t, text, func(c *uplink.Config) { c.LogRate = 16 << 10 })
	start := time.Now()
	h.request(protocol.LogsOpen, "", "web", &protocol.LogsOptions{}, nil, "gw-1")
	id := h.lastID()
	eventually(t, "the paced stream's end", func() bool { return h.ended(id) })
	// 16 KiB at once, then 32 KiB at 16 KiB/s.
	if took := time.Since(start); took < 1500*time.Millisecond {
		t.Fatalf("48 KiB at 16 KiB/s took %s", took)
	}
}
