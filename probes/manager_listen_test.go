package probes

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/pod/vocab"
)

// fakeClock moves only when advanced: the workers' timers fire then and
// never by themselves, so a probe that runs did so because it was poked.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	timers []*fakeTimer
	resets int
}

type fakeTimer struct {
	clock *fakeClock
	c     chan time.Time
	at    time.Time
	armed bool
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTimer(d time.Duration) timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTimer{clock: c, c: make(chan time.Time, 1), at: c.now.Add(d), armed: true}
	c.timers = append(c.timers, t)
	return t
}

// advance moves the clock and fires the timers that came due.
func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.timers {
		if t.armed && !t.at.After(c.now) {
			t.armed = false
			t.c <- c.now
		}
	}
}

func (c *fakeClock) resetCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.resets
}

// armed counts the timers waiting to fire.
func (c *fakeClock) armed() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, t := range c.timers {
		if t.armed {
			n++
		}
	}
	return n
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

// Reset and Stop drop a fire not yet received, as *time.Timer does since
// Go 1.23.
func (t *fakeTimer) Reset(d time.Duration) {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.drain()
	t.at, t.armed = t.clock.now.Add(d), true
	t.clock.resets++
}

func (t *fakeTimer) Stop() {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	t.drain()
	t.armed = false
}

func (t *fakeTimer) drain() {
	select {
	case <-t.c:
	default:
	}
}

// server is a loopback port whose listener the test opens and closes, and
// which counts the probe connections dialled to it.
type server struct {
	port  int
	ln    net.Listener
	dials atomic.Int32
}

func newServer(t *testing.T) *server {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{port: ln.Addr().(*net.TCPAddr).Port}
	ln.Close() // the port starts closed, as a server that has not listened yet
	t.Cleanup(func() {
		if s.ln != nil {
			s.ln.Close()
		}
	})
	return s
}

func (s *server) listen(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
	if err != nil {
		t.Fatalf("listen again on port %d: %v", s.port, err)
	}
	s.ln = ln
}

func (s *server) close() { s.ln.Close(); s.ln = nil }

func (s *server) target() Target {
	return Target{Host: "127.0.0.1", DialIn: func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
		s.dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}}
}

func tcpProbe(port intstr.IntOrString, period, initialDelay, failures int32) *v1.Probe {
	return &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: port}},
		PeriodSeconds: period, InitialDelaySeconds: initialDelay, TimeoutSeconds: 1,
		SuccessThreshold: 1, FailureThreshold: failures}
}

// listenManager is a manager on a fake clock, with one second per unit:
// with a 30 s period, only a poke makes a probe run.
func listenManager(t *testing.T) (*Manager, *fakeClock) {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m := NewManager(ctx)
	clk := newFakeClock()
	m.clock = clk
	return m, clk
}

func nextResult(t *testing.T, m *Manager, what string) Result {
	t.Helper()
	select {
	case r := <-m.Results():
		return r
	case <-time.After(10 * time.Second):
		t.Fatalf("not within 10s: %s", what)
	}
	return Result{}
}

func noResult(t *testing.T, m *Manager, what string) {
	t.Helper()
	select {
	case r := <-m.Results():
		t.Fatalf("%s: got %+v", what, r)
	case <-time.After(100 * time.Millisecond):
	}
}

// A readiness probe with a 30 s period turns Ready when its port starts
// listening, and unready when the listener closes, with the clock
// standing still: the runs come from the events, not the period.
func TestListeningRunsReadinessAtOnce(t *testing.T) {
	m, clk := listenManager(t)
	s := newServer(t)
	c := &v1.Container{Name: "app", ReadinessProbe: tcpProbe(intstr.FromInt(s.port), 30, 0, 1)}
	m.Start("i1", c, s.target())
	waitFor(t, "the readiness worker armed its first timer", func() bool { return clk.armed() == 1 })

	s.listen(t)
	if n := m.Listening("i1", s.port, true); n != 1 {
		t.Fatalf("Listening triggered %d probes, want 1", n)
	}
	if r := nextResult(t, m, "readiness success after the port opened"); r.Kind != vocab.Readiness || !r.OK || !r.Listen {
		t.Fatalf("verdict = %+v, want readiness success from the listen's run", r)
	}
	s.close()
	if n := m.Listening("i1", s.port, false); n != 1 {
		t.Fatalf("a close triggered %d probes, want 1", n)
	}
	if r := nextResult(t, m, "readiness failure after the listener closed"); r.Kind != vocab.Readiness || r.OK || !r.Listen {
		t.Fatalf("verdict = %+v, want readiness failure from the close's run", r)
	}
	if d := s.dials.Load(); d != 2 {
		t.Fatalf("%d probe runs, want 2 (one per event)", d)
	}
}

// Thresholds still apply: one triggered failure of three is no verdict,
// and the next periodic run comes a full period after the triggered one.
func TestListeningKeepsThresholdsAndPeriod(t *testing.T) {
	m, clk := listenManager(t)
	s := newServer(t)
	s.listen(t)
	c := &v1.Container{Name: "app", ReadinessProbe: tcpProbe(intstr.FromInt(s.port), 30, 0, 3)}
	m.Start("i1", c, s.target())
	waitFor(t, "the readiness worker armed its first timer", func() bool { return clk.armed() == 1 })
	m.Listening("i1", s.port, true)
	if r := nextResult(t, m, "readiness success"); !r.OK {
		t.Fatalf("verdict = %+v, want success", r)
	}
	waitFor(t, "the worker armed its next period", func() bool { return clk.armed() == 1 && s.dials.Load() == 1 })

	s.close()
	m.Listening("i1", s.port, false)
	waitFor(t, "the triggered run after the close", func() bool { return s.dials.Load() == 2 })
	noResult(t, m, "one failure of a failureThreshold 3 changed the verdict")

	waitFor(t, "the worker armed its next period", func() bool { return clk.armed() == 1 })
	clk.advance(29 * time.Second)
	noResult(t, m, "a periodic run before the period after the triggered run")
	if d := s.dials.Load(); d != 2 {
		t.Fatalf("%d runs after 29 s, want 2", d)
	}
	clk.advance(time.Second)
	waitFor(t, "the periodic run a period after the triggered one", func() bool { return s.dials.Load() == 3 })
}

// A listen during initialDelaySeconds runs the probe when the delay ends,
// not before.
func TestListeningWaitsForInitialDelay(t *testing.T) {
	m, clk := listenManager(t)
	s := newServer(t)
	s.listen(t)
	c := &v1.Container{Name: "app", ReadinessProbe: tcpProbe(intstr.FromInt(s.port), 30, 5, 1)}
	m.Start("i1", c, s.target())
	waitFor(t, "the readiness worker armed its first timer", func() bool { return clk.armed() == 1 })
	clk.advance(2 * time.Second)
	m.Listening("i1", s.port, true)
	// The poke re-arms the timer for the delay's end; wait for that, then
	// check that nothing ran.
	waitFor(t, "the worker re-armed its timer for the delay's end", func() bool { return clk.resetCount() == 1 })
	if d := s.dials.Load(); d != 0 {
		t.Fatalf("the probe ran %d times inside initialDelaySeconds", d)
	}
	clk.advance(3*time.Second - time.Millisecond)
	noResult(t, m, "a run a millisecond before initialDelaySeconds ended")
	clk.advance(time.Millisecond)
	if r := nextResult(t, m, "readiness success when initialDelaySeconds ended"); !r.OK || !r.Listen {
		t.Fatalf("verdict = %+v, want success from the listen's delayed run", r)
	}
}

// A verdict a periodic run changed says so: only a listen's run is
// reported as one.
func TestPeriodicVerdictIsNotListen(t *testing.T) {
	m, clk := listenManager(t)
	s := newServer(t)
	s.listen(t)
	c := &v1.Container{Name: "app", ReadinessProbe: tcpProbe(intstr.FromInt(s.port), 30, 0, 1)}
	m.Start("i1", c, s.target())
	waitFor(t, "the readiness worker armed its first timer", func() bool { return clk.armed() == 1 })
	clk.advance(time.Second)
	if r := nextResult(t, m, "readiness success from the first periodic run"); !r.OK || r.Listen {
		t.Fatalf("verdict = %+v, want success from a periodic run", r)
	}
}

// Another port, a liveness probe, an exec probe, a startup probe on a
// close, and an unknown instance trigger nothing; a named port resolves
// to the container's port.
func TestListeningTriggersOnlyItsPort(t *testing.T) {
	m, clk := listenManager(t)
	s := newServer(t)
	s.listen(t)
	c := &v1.Container{Name: "app",
		Ports:          []v1.ContainerPort{{Name: "http", ContainerPort: int32(s.port)}},
		StartupProbe:   tcpProbe(intstr.FromString("http"), 30, 0, 1),
		LivenessProbe:  tcpProbe(intstr.FromInt(s.port), 30, 0, 1),
		ReadinessProbe: execProbeOf("ready")}
	tg := s.target()
	tg.Ports = c.Ports
	m.Start("i1", c, tg)
	waitFor(t, "the startup worker armed its first timer", func() bool { return clk.armed() == 1 })
	for _, tc := range []struct {
		id     string
		port   int
		opened bool
	}{{"i1", s.port + 1, true}, {"i1", s.port, false}, {"other", s.port, true}} {
		if n := m.Listening(tc.id, tc.port, tc.opened); n != 0 {
			t.Fatalf("Listening(%s, %d, %v) triggered %d probes, want 0", tc.id, tc.port, tc.opened, n)
		}
	}
	if n := m.Listening("i1", s.port, true); n != 1 {
		t.Fatalf("the named port's listen triggered %d probes, want 1 (startup)", n)
	}
	if r := nextResult(t, m, "startup success on the named port"); r.Kind != vocab.Startup || !r.OK {
		t.Fatalf("verdict = %+v, want startup success", r)
	}
	waitFor(t, "liveness started after startup", func() bool { return m.probing("i1", vocab.Liveness) })
	if n := m.Listening("i1", s.port, true); n != 0 {
		t.Fatalf("a listen after startup succeeded triggered %d probes (liveness or exec readiness), want 0", n)
	}
	if d := s.dials.Load(); d != 1 {
		t.Fatalf("%d probe connections, want 1 (the startup run)", d)
	}
}

func TestProbePort(t *testing.T) {
	ports := []v1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "bad", ContainerPort: 70000}}
	for _, tc := range []struct {
		name string
		h    v1.ProbeHandler
		want int
		ok   bool
	}{
		{"tcp number", v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt(81)}}, 81, true},
		{"http name", v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Port: intstr.FromString("http")}}, 8080, true},
		{"grpc", v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: 9090}}, 9090, true},
		{"unknown name", v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("nope")}}, 0, false},
		{"out of range", v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromString("bad")}}, 0, false},
		{"zero", v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt(0)}}, 0, false},
		{"exec", v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}, 0, false},
	} {
		got, ok := ProbePort(tc.h, ports)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: ProbePort = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
