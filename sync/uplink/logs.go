package uplink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	mqtt "github.com/eclipse/paho.mqtt.golang"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/sync/throttle"
)

// Pods' logs for the hub (podhub logs): the hub asks on logs-request with
// a signed request bound to this device, an ID and a short validity; the
// device streams the log back in frames on logs, a few streams at a time,
// each paced and capped, a stream ending when the hub cancels it or stops
// sending keep-alives.

// PodLogs reads pods' logs for the hub as podvisor logs reads them; the
// daemon's wiring provides it.
type PodLogs interface {
	// OpenLog locates a pod's log. A *protocol.LogsError says why it
	// cannot, in kubelet words, with the status reason. The returned
	// function writes the log to w as the options say (following it
	// while the container runs, until ctx ends, with Follow).
	OpenLog(namespace, pod string, opts protocol.LogsOptions) (func(ctx context.Context, w io.Writer) error, error)
}

// Defaults of the log streams' bounds (Config.LogStreams, LogRate,
// LogKeepAlive).
const (
	defaultLogStreams   = 4
	defaultLogRate      = 64 << 10 // bytes a second, per stream
	defaultLogKeepAlive = 30 * time.Second
	// maxSeenLogRequests bounds the request IDs remembered against
	// replay; more requests within their validity are refused.
	maxSeenLogRequests = 1024
	// logPublishWait bounds how long a frame may wait for the broker's
	// acknowledgement before the stream gives up.
	logPublishWait = 10 * time.Second
	// logRefusalRate bounds the refusals answered a second (bursts of as
	// many): past it a request over a bound goes unanswered (the hub's
	// reader times out), so a burst of requests never makes the device
	// publish past its broker's rate limit.
	logRefusalRate = 10
	// logFrameGap is the least time between two frames of a stream: a
	// log written line by line leaves in frames of what came meanwhile,
	// at most 10 a second, so four streams stay far under a broker's
	// message rate.
	logFrameGap = 100 * time.Millisecond
)

// logStreams is the agent's state of its log streams; guarded by mu.
type logStreams struct {
	on      bool
	mu      sync.Mutex
	streams map[string]*logStream
	// seen is every open's ID with when it can be forgotten (its
	// validity's end, widened as OpenLogsRequest widens it), on this
	// device's clock.
	seen    map[string]time.Time
	refused *throttle.Counter
	// answers paces the refusals sent (logRefusalRate).
	answers pacer
	wg      sync.WaitGroup
}

// logStream is one stream under way.
type logStream struct {
	cancel context.CancelFunc
	// last is the newest request's Sent for this stream: a keep-alive or
	// cancel not newer is a replay.
	last  time.Time
	alive *time.Timer
}

func (a *Agent) initLogs() {
	a.logs = logStreams{on: a.cfg.PodLogs != nil && a.cfg.HubKey != nil, streams: map[string]*logStream{},
		seen: map[string]time.Time{}, refused: throttle.New(5, time.Minute, nil),
		answers: pacer{rate: logRefusalRate, tokens: logRefusalRate, last: a.now()}}
	if a.cfg.LogStreams <= 0 {
		a.cfg.LogStreams = defaultLogStreams
	}
	if a.cfg.LogRate <= 0 {
		a.cfg.LogRate = defaultLogRate
	}
	if a.cfg.LogKeepAlive <= 0 {
		a.cfg.LogKeepAlive = defaultLogKeepAlive
	}
}

// LogStreams is how many log streams are under way.
func (a *Agent) LogStreams() int {
	a.logs.mu.Lock()
	defer a.logs.mu.Unlock()
	return len(a.logs.streams)
}

// stopLogs ends every stream and waits for them (Run's end).
func (a *Agent) stopLogs() {
	a.logs.mu.Lock()
	for _, s := range a.logs.streams {
		s.cancel()
	}
	a.logs.mu.Unlock()
	a.logs.wg.Wait()
}

// onLogsRequest runs on paho's reader: it checks a request and starts,
// keeps or ends a stream, never blocking on one.
func (a *Agent) onLogsRequest(c mqtt.Client, m mqtt.Message) {
	now := a.now()
	r, err := protocol.OpenLogsRequest(m.Payload(), a.cfg.DeviceID, a.cfg.HubKey, now)
	if err != nil {
		a.refuseLogs(m.Topic(), err)
		return
	}
	l := &a.logs
	l.mu.Lock()
	defer l.mu.Unlock()
	if r.Op != protocol.LogsOpen {
		s := l.streams[r.ID]
		if s == nil {
			return // over already, or never ours
		}
		if !r.Sent.After(s.last) {
			a.refuseLogs(m.Topic(), fmt.Errorf("logs request %s: a %s not newer than the stream's last request (a replay)", r.ID, r.Op))
			return
		}
		s.last = r.Sent
		if r.Op == protocol.LogsCancel {
			s.cancel()
		} else {
			s.alive.Reset(a.cfg.LogKeepAlive)
		}
		return
	}
	for id, until := range l.seen {
		if now.After(until) {
			delete(l.seen, id)
		}
	}
	if _, dup := l.seen[r.ID]; dup {
		a.refuseLogs(m.Topic(), fmt.Errorf("logs request %s: seen before (a replay)", r.ID))
		return
	}
	if len(l.seen) >= maxSeenLogRequests {
		a.refuseLogs(m.Topic(), fmt.Errorf("logs request %s: %d requests within their validity, over the limit", r.ID, len(l.seen)))
		if l.answers.allow(now, 1) {
			a.sendLogsError(c, r.ID, &protocol.LogsError{Reason: protocol.LogsTooManyRequests, Message: "too many log requests"})
		}
		return
	}
	l.seen[r.ID] = r.Expires.Add(r.Expires.Sub(r.Sent))
	if len(l.streams) >= a.cfg.LogStreams {
		if l.answers.allow(now, 1) {
			a.sendLogsError(c, r.ID, &protocol.LogsError{Reason: protocol.LogsTooManyRequests,
				Message: fmt.Sprintf("too many log streams: device %s serves at most %d at once", a.cfg.DeviceID, a.cfg.LogStreams)})
		} else {
			a.refuseLogs(m.Topic(), fmt.Errorf("logs request %s: over the stream bound, and over the rate of refusals answered", r.ID))
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &logStream{cancel: cancel, last: r.Sent, alive: time.AfterFunc(a.cfg.LogKeepAlive, cancel)}
	l.streams[r.ID] = s
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer func() {
			s.alive.Stop()
			cancel()
			l.mu.Lock()
			delete(l.streams, r.ID)
			l.mu.Unlock()
		}()
		a.streamLog(ctx, c, r)
	}()
}

// streamLog sends one pod's log as the request asks.
func (a *Agent) streamLog(ctx context.Context, c mqtt.Client, r *protocol.LogsRequest) {
	opts := *r.Options
	if opts.SinceSeconds != nil {
		// As the kubelet: seconds before now on this device's clock.
		t := a.now().Add(-time.Duration(*opts.SinceSeconds) * time.Second)
		opts.SinceTime, opts.SinceSeconds = &t, nil
	}
	copyLog, err := a.cfg.PodLogs.OpenLog(r.Namespace, r.Pod, opts)
	if err != nil {
		a.sendLogsError(c, r.ID, asLogsError(err))
		return
	}
	limit := int64(protocol.DefaultLogsLimitBytes)
	if opts.LimitBytes != nil {
		limit = min(limit, *opts.LimitBytes)
	}
	w := &frameWriter{ctx: ctx, c: c, topic: a.topics.Device(a.cfg.DeviceID, protocol.KindLogs), id: r.ID, limit: limit,
		pace: pacer{rate: float64(a.cfg.LogRate), tokens: float64(a.cfg.LogRate), last: a.now()}, now: a.now}
	// Frame 0 at once: the hub knows the log was found, even one that
	// stays quiet.
	if err := w.send(nil, false, nil); err != nil {
		return
	}
	err = copyLog(ctx, w)
	if ctx.Err() != nil || w.err != nil {
		return // the hub went, or the link: nobody to tell
	}
	if errors.Is(err, errLogLimit) {
		err = nil
	}
	if ferr := w.flush(); ferr != nil {
		return
	}
	var le *protocol.LogsError
	if err != nil {
		le = asLogsError(err)
	}
	w.send(nil, true, le)
}

// asLogsError is err as a device reports it.
func asLogsError(err error) *protocol.LogsError {
	var le *protocol.LogsError
	if errors.As(err, &le) {
		return le
	}
	return &protocol.LogsError{Reason: protocol.LogsInternalError, Message: err.Error()}
}

// sendLogsError answers a request with its one, last frame.
func (a *Agent) sendLogsError(c mqtt.Client, id string, le *protocol.LogsError) {
	msg, err := protocol.EncodeLogsFrame(protocol.LogsFrame{Request: id, End: true, Error: le.Message, Reason: le.Reason}, nil)
	if err == nil {
		c.Publish(a.topics.Device(a.cfg.DeviceID, protocol.KindLogs), 1, false, msg)
	}
}

// refuseLogs counts a logs request not taken, logging throttled.
func (a *Agent) refuseLogs(topic string, err error) {
	log, suppressed := a.logs.refused.Note()
	if suppressed > 0 {
		a.log.Warn("refused more logs requests", "topic", topic, "count", suppressed, "total", a.logs.refused.Total())
	}
	if log {
		a.log.Warn("refused a logs request", "topic", topic, "err", err)
	}
}

var errLogLimit = errors.New("the stream's byte limit is reached")

// frameWriter cuts a log into frames of at most MaxLogsFrameData bytes,
// paced, up to limit bytes; Flush (called by the log follower after each
// read) sends what it holds.
type frameWriter struct {
	ctx          context.Context
	c            mqtt.Client
	topic, id    string
	seq          int64
	buf          []byte
	limit, wrote int64
	pace         pacer
	now          func() time.Time
	last         time.Time // when the last frame left
	err          error     // the first failure to send: the stream is over
}

func (w *frameWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		if w.err != nil {
			return n, w.err
		}
		if w.wrote >= w.limit {
			return n, errLogLimit
		}
		take := min(len(p), protocol.MaxLogsFrameData-len(w.buf), int(min(w.limit-w.wrote, protocol.MaxLogsFrameData)))
		w.buf = append(w.buf, p[:take]...)
		w.wrote += int64(take)
		p, n = p[take:], n+take
		if len(w.buf) == protocol.MaxLogsFrameData {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// Flush sends what the writer holds (the log follower calls it).
func (w *frameWriter) Flush() { w.flush() }

func (w *frameWriter) flush() error {
	if len(w.buf) == 0 || w.err != nil {
		return w.err
	}
	err := w.send(w.buf, false, nil)
	w.buf = w.buf[:0]
	return err
}

// send publishes the next frame once the pace allows, and waits for the
// broker to take it, so a slow link holds the stream back rather than
// filling memory.
func (w *frameWriter) send(data []byte, end bool, le *protocol.LogsError) error {
	if w.err != nil {
		return w.err
	}
	now := w.now()
	d := w.pace.take(now, len(data))
	if !w.last.IsZero() {
		d = max(d, w.last.Add(logFrameGap).Sub(now))
	}
	if d > 0 {
		t := time.NewTimer(d)
		select {
		case <-w.ctx.Done():
			t.Stop()
			w.err = w.ctx.Err()
			return w.err
		case <-t.C:
		}
	}
	f := protocol.LogsFrame{Request: w.id, Seq: w.seq, End: end}
	if le != nil {
		f.Error, f.Reason = le.Message, le.Reason
	}
	msg, err := protocol.EncodeLogsFrame(f, data)
	if err != nil {
		w.err = err
		return err
	}
	w.seq++
	w.last = w.now()
	tok := w.c.Publish(w.topic, 1, false, msg)
	if !tok.WaitTimeout(logPublishWait) {
		w.err = fmt.Errorf("logs frame %d: not taken by the broker within %s", f.Seq, logPublishWait)
	} else if tok.Error() != nil {
		w.err = tok.Error()
	}
	return w.err
}

// pacer is a token bucket (of bytes, or of messages): rate a second, at
// most rate saved.
type pacer struct {
	rate, tokens float64
	last         time.Time
}

// take spends n bytes at now and returns how long to wait before sending
// them (0: at once). A clock that steps back adds nothing.
func (p *pacer) take(now time.Time, n int) time.Duration {
	if dt := now.Sub(p.last).Seconds(); dt > 0 {
		p.tokens = min(p.rate, p.tokens+dt*p.rate)
	}
	p.last = now
	p.tokens -= float64(n)
	if p.tokens >= 0 {
		return 0
	}
	return time.Duration(-p.tokens / p.rate * float64(time.Second))
}

// allow spends n at now if there are that many, else spends nothing.
func (p *pacer) allow(now time.Time, n float64) bool {
	if dt := now.Sub(p.last).Seconds(); dt > 0 {
		p.tokens = min(p.rate, p.tokens+dt*p.rate)
	}
	p.last = now
	if p.tokens < n {
		return false
	}
	p.tokens -= n
	return true
}
