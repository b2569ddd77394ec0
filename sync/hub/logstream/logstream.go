// Package logstream is the hub's side of pods' logs over MQTT (podhub
// logs, the Kubernetes API's pods/log): it asks a device for a pod's log
// with a signed request and writes the frames the device streams back, in
// order, to the reader, keeping a follow stream alive while the reader
// reads and cancelling it when the reader goes.
package logstream

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/throttle"
)

// Config is what a Streamer needs.
type Config struct {
	Fleet *fleetdb.Fleet
	// Key signs the requests (the hub's key, as desired documents).
	Key    ed25519.PrivateKey
	Topics protocol.Topics
	// Publish sends a request to the broker (devicelink.Link.Publish).
	Publish func(topic string, retained bool, payload []byte)
	// DeviceTimeout is how long a device may be silent and still be
	// Ready (default fleetdb.DefaultDeviceTimeout).
	DeviceTimeout time.Duration
	// Answer is how long a device has to send a stream's first frame
	// (default 10 s); KeepAlive the period of keep-alives and of the
	// check that the device is still there (default 10 s); Valid how
	// long a request is valid (default 60 s, at most
	// protocol.MaxLogsRequestTTL).
	Answer, KeepAlive, Valid time.Duration
	// MaxStreams bounds the streams under way at the hub (default 64);
	// each holds at most Queue frames the reader has not taken (default
	// 32, 16 KiB each): a reader slower than that is cut off.
	MaxStreams, Queue int
	// Now is the clock (default time.Now).
	Now func() time.Time
	Log *slog.Logger
}

// Streamer asks devices for pods' logs. Its PodLogs is what the
// Kubernetes API's pods/log and podhub logs call; Frame is what the
// device link hands it.
type Streamer struct {
	cfg     Config
	refused *throttle.Counter

	mu      sync.Mutex
	streams map[string]*stream
}

// stream is one request waiting for, or reading, its frames.
type stream struct {
	device string
	frames chan frame
	// over is closed when the stream's queue overflowed.
	over     chan struct{}
	overOnce sync.Once
}

type frame struct {
	f    *protocol.LogsFrame
	data []byte
}

// New makes a Streamer.
func New(cfg Config) *Streamer {
	if cfg.DeviceTimeout <= 0 {
		cfg.DeviceTimeout = fleetdb.DefaultDeviceTimeout
	}
	if cfg.Answer <= 0 {
		cfg.Answer = 10 * time.Second
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 10 * time.Second
	}
	if cfg.Valid <= 0 || cfg.Valid > protocol.MaxLogsRequestTTL {
		cfg.Valid = time.Minute
	}
	if cfg.MaxStreams <= 0 {
		cfg.MaxStreams = 64
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 32
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Streamer{cfg: cfg, refused: throttle.New(5, time.Minute, nil), streams: map[string]*stream{}}
}

// Frame takes a frame a device sent; it runs on the link's reader and
// never blocks. A frame for no stream of that device (one cancelled a
// moment ago, or forged) is dropped.
func (s *Streamer) Frame(device string, payload []byte) {
	f, data, err := protocol.DecodeLogsFrame(payload)
	if err != nil {
		s.refuse(device, err)
		return
	}
	s.mu.Lock()
	st := s.streams[f.Request]
	s.mu.Unlock()
	if st == nil {
		return
	}
	if st.device != device {
		s.refuse(device, fmt.Errorf("a logs frame for request %s, which went to device %s", f.Request, st.device))
		return
	}
	select {
	case st.frames <- frame{f, data}:
	default:
		st.overOnce.Do(func() { close(st.over) })
	}
}

func (s *Streamer) refuse(device string, err error) {
	log, suppressed := s.refused.Note()
	if suppressed > 0 {
		s.cfg.Log.Warn("refused more logs frames", "count", suppressed, "total", s.refused.Total())
	}
	if log {
		s.cfg.Log.Warn("refused a logs frame", "device", device, "err", err)
	}
}

// PodLogs writes a pod's log on a device to w as opts say, until the log
// ends, or with Follow until ctx ends (the reader went). Its errors are
// the API server's StatusErrors: NotFound for an unknown device (nodes
// "X" not found) or pod (the device's pods "x" not found),
// ServiceUnavailable for a device that is offline, Timeout for one that
// does not answer, BadRequest for options or a container the device
// refuses, TooManyRequests over a bound. An error after some of the log
// was written ends the stream.
func (s *Streamer) PodLogs(ctx context.Context, device, namespace, pod string, opts *v1.PodLogOptions, w io.Writer) error {
	if err := s.ready(device); err != nil {
		return err
	}
	lo := options(opts)
	if err := lo.Validate(); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if s.cfg.Key == nil {
		return apierrors.NewInternalError(errors.New("the hub has no signing key for logs requests"))
	}
	id := newID()
	st := &stream{device: device, frames: make(chan frame, s.cfg.Queue), over: make(chan struct{})}
	s.mu.Lock()
	if len(s.streams) >= s.cfg.MaxStreams {
		s.mu.Unlock()
		return apierrors.NewTooManyRequests(fmt.Sprintf("too many log streams at the hub (at most %d)", s.cfg.MaxStreams), 1)
	}
	s.streams[id] = st
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.streams, id)
		s.mu.Unlock()
	}()
	if err := s.send(protocol.LogsRequest{Device: device, ID: id, Op: protocol.LogsOpen, Namespace: namespace, Pod: pod, Options: &lo}); err != nil {
		return apierrors.NewInternalError(err)
	}
	ended := false
	defer func() {
		if !ended {
			// The reader went, or the stream failed here: the device stops.
			s.send(protocol.LogsRequest{Device: device, ID: id, Op: protocol.LogsCancel})
		}
	}()
	answer := time.NewTimer(s.cfg.Answer)
	defer answer.Stop()
	tick := time.NewTicker(s.cfg.KeepAlive)
	defer tick.Stop()
	var next int64
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-answer.C:
			if next == 0 {
				return apierrors.NewTimeoutError(fmt.Sprintf("device %q did not answer within %s", device, s.cfg.Answer), 1)
			}
		case <-st.over:
			return apierrors.NewInternalError(fmt.Errorf("the log of pod %q on device %q came faster than it was read; stream cut", pod, device))
		case <-tick.C:
			if err := s.ready(device); err != nil {
				return err
			}
			s.send(protocol.LogsRequest{Device: device, ID: id, Op: protocol.LogsKeepAlive})
		case fr := <-st.frames:
			switch {
			case fr.f.Seq < next:
				continue // sent again by the broker
			case fr.f.Seq > next:
				return apierrors.NewInternalError(fmt.Errorf("the log stream of pod %q on device %q lost frames %d to %d", pod, device, next, fr.f.Seq-1))
			}
			next++
			if fr.f.Error != "" {
				ended = true
				return deviceError(fr.f)
			}
			if len(fr.data) > 0 {
				if _, err := w.Write(fr.data); err != nil {
					return nil // the reader went
				}
				if fl, ok := w.(http.Flusher); ok {
					fl.Flush()
				}
			}
			if fr.f.End {
				ended = true
				return nil
			}
		}
	}
}

// ready answers NotFound for a device the hub does not know and
// ServiceUnavailable for one that is offline or not Ready.
func (s *Streamer) ready(device string) error {
	d, err := s.cfg.Fleet.GetDevice(device, s.cfg.Now(), s.cfg.DeviceTimeout)
	if errors.Is(err, fleetdb.ErrNotFound) {
		return apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, device)
	}
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if d.Online && d.Ready {
		return nil
	}
	seen := "never seen"
	if !d.LastSeen.IsZero() {
		seen = "last seen " + d.LastSeen.UTC().Format(time.RFC3339)
	}
	return apierrors.NewServiceUnavailable(fmt.Sprintf("device %q is offline (%s)", device, seen))
}

// send signs and publishes a request, valid from now for Valid.
func (s *Streamer) send(r protocol.LogsRequest) error {
	now := s.cfg.Now()
	r.Sent, r.Expires = now, now.Add(s.cfg.Valid)
	msg, err := protocol.SignLogsRequest(r, s.cfg.Key)
	if err != nil {
		return err
	}
	s.cfg.Publish(s.cfg.Topics.Device(r.Device, protocol.KindLogsRequest), false, msg)
	return nil
}

// deviceError is a device's refusal as the API server's StatusError.
func deviceError(f *protocol.LogsFrame) error {
	code := map[string]int32{protocol.LogsNotFound: http.StatusNotFound, protocol.LogsBadRequest: http.StatusBadRequest,
		protocol.LogsTooManyRequests: http.StatusTooManyRequests}[f.Reason]
	reason := metav1.StatusReason(f.Reason)
	if code == 0 {
		code, reason = http.StatusInternalServerError, metav1.StatusReasonInternalError
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: f.Error}}
}

// options are the PodLogOptions a device honours.
func options(o *v1.PodLogOptions) protocol.LogsOptions {
	if o == nil {
		return protocol.LogsOptions{}
	}
	lo := protocol.LogsOptions{Container: o.Container, Follow: o.Follow, Previous: o.Previous, Timestamps: o.Timestamps,
		SinceSeconds: o.SinceSeconds, TailLines: o.TailLines, LimitBytes: o.LimitBytes}
	if o.SinceTime != nil {
		t := o.SinceTime.Time
		lo.SinceTime = &t
	}
	return lo
}

// newID is a stream's random ID: 128 bits in hex.
func newID() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}
