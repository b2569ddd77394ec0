package probes

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podvisor/podvisor/pod/vocab"
)

// Result is a probe verdict that changed, past its threshold, or a
// warning about a probe run (WarningOnly: the verdict did not change).
type Result struct {
	InstanceID string
	Kind       vocab.ProbeKind
	OK         bool
	Message    string
	// Warning is the kubelet's ProbeWarning event text ("Liveness probe
	// warning: Probe terminated redirects, ..."), sent when a run warns
	// after one that did not: a probe that keeps warning is not an event
	// every period.
	Warning     string
	WarningOnly bool
	// Errored: Warning is the kubelet's Unhealthy event for a run the
	// runtime could not make ("Liveness probe errored and resulted in
	// unknown state: ..."), sent at the first of a streak; such a run
	// changes no verdict and counts toward no threshold.
	Errored bool
	// Listen: the run was one a listener's opening or closing brought
	// (Listening), not a periodic one.
	Listen bool
}

// counter applies success and failure thresholds to raw results, as the
// kubelet's probe worker does: a verdict changes only after the threshold
// number of identical results in a row.
type counter struct {
	successThreshold, failureThreshold int32
	// known is false while the verdict is the kubelet's Unknown, the
	// initial result of a startup probe: its first verdict, failure
	// included, is a change.
	known   bool
	verdict bool
	last    bool
	run     int32
}

// initialResult is a probe's result before it first ran: the kubelet
// starts liveness at Success, readiness at Failure, startup at Unknown.
func initialResult(kind vocab.ProbeKind) (verdict, known bool) {
	switch kind {
	case vocab.Liveness:
		return true, true
	case vocab.Readiness:
		return false, true
	}
	return false, false
}

func newCounter(p *v1.Probe, kind vocab.ProbeKind) *counter {
	verdict, known := initialResult(kind)
	return &counter{successThreshold: p.SuccessThreshold, failureThreshold: p.FailureThreshold,
		known: known, verdict: verdict, last: verdict}
}

// observe records one result and reports whether the verdict changed.
func (c *counter) observe(ok bool) bool {
	if ok == c.last {
		c.run++
	} else {
		c.last, c.run = ok, 1
	}
	threshold := c.failureThreshold
	if ok {
		threshold = c.successThreshold
	}
	if c.run < threshold || (c.known && ok == c.verdict) {
		return false
	}
	c.known, c.verdict = true, ok
	return true
}

// clock is the time the workers schedule by; tests use a fake one that
// moves only when told.
type clock interface {
	Now() time.Time
	NewTimer(d time.Duration) timer
}

// timer is the part of *time.Timer the workers use.
type timer interface {
	C() <-chan time.Time
	Reset(d time.Duration)
	Stop()
}

type realClock struct{}

func (realClock) Now() time.Time                 { return time.Now() }
func (realClock) NewTimer(d time.Duration) timer { return realTimer{time.NewTimer(d)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time   { return r.t.C }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }
func (r realTimer) Stop()                 { r.t.Stop() }

// Manager runs the probes of every probed container instance.
type Manager struct {
	// TimeUnit is one "second" of probe settings; tests shorten it.
	TimeUnit time.Duration
	// Ran, when set (before the first Start), is told of every run, on
	// the worker's goroutine: the instance, the kind, whether it passed
	// and how long it took (the kubelet's prober metrics).
	Ran     func(instanceID string, kind vocab.ProbeKind, ok bool, took time.Duration)
	results chan Result
	ctx     context.Context
	clock   clock

	mu        sync.Mutex
	instances map[string]*probed // by instance ID
}

// probed is one instance's probes: a context that ends them all, and
// one per running kind. A kind once stopped never starts again for the
// instance (a startup success must not bring back a stopped liveness).
type probed struct {
	ctx     context.Context
	cancel  context.CancelFunc
	kinds   map[vocab.ProbeKind]context.CancelFunc
	stopped map[vocab.ProbeKind]bool
	// pokes run a kind's probe now ([Manager.Listening]); one pending
	// poke is enough.
	pokes map[vocab.ProbeKind]chan struct{}
	spec  *v1.Container
	ports []v1.ContainerPort
}

// NewManager returns a manager; its workers stop when ctx ends.
func NewManager(ctx context.Context) *Manager {
	return &Manager{TimeUnit: time.Second, results: make(chan Result, 256), ctx: ctx, clock: realClock{}, instances: map[string]*probed{}}
}

// Results delivers changed verdicts.
func (m *Manager) Results() <-chan Result { return m.results }

// Start probes a container instance: its startup probe first, then its
// liveness and readiness probes once startup succeeded.
func (m *Manager) Start(instanceID string, c *v1.Container, t Target) {
	m.mu.Lock()
	if _, ok := m.instances[instanceID]; ok {
		m.mu.Unlock()
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	m.instances[instanceID] = &probed{ctx: ctx, cancel: cancel,
		kinds: map[vocab.ProbeKind]context.CancelFunc{}, stopped: map[vocab.ProbeKind]bool{},
		pokes: map[vocab.ProbeKind]chan struct{}{}, spec: c, ports: t.Ports}
	m.mu.Unlock()
	w := &workers{m: m, id: instanceID, spec: c, target: t}
	if c.StartupProbe != nil {
		w.start(vocab.Startup, c.StartupProbe)
		return
	}
	w.startMain()
}

// Stop ends the given probes of an instance, or all of them when kinds is
// empty. The kubelet stops liveness and startup when a container starts
// terminating and readiness only when it exited.
func (m *Manager) Stop(instanceID string, kinds ...vocab.ProbeKind) {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.instances[instanceID]
	if !ok {
		return
	}
	if len(kinds) == 0 {
		p.cancel()
		delete(m.instances, instanceID)
		return
	}
	for _, k := range kinds {
		p.stopped[k] = true
		if cancel, ok := p.kinds[k]; ok {
			cancel()
			delete(p.kinds, k)
			delete(p.pokes, k)
		}
	}
}

// Listening tells the manager that a socket of the instance's pod entered
// LISTEN on port (opened) or left it. A startup or readiness probe of the
// instance on that port (tcpSocket, httpGet or grpc; a named port
// resolves to the container's port) then runs at once, and on a close
// only the readiness probe does: a startup probe has nothing to learn
// from a port closing, and liveness keeps its period so that a restart
// still needs its failure threshold of periodic failures. The run is
// an ordinary one: its result counts toward the thresholds and the next
// periodic run comes a period after it. A probe still in its
// initialDelaySeconds runs when the delay ends. Listening returns how
// many probes it triggered.
func (m *Manager) Listening(instanceID string, port int, opened bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	inst, ok := m.instances[instanceID]
	if !ok {
		return 0
	}
	n := 0
	for _, kind := range []vocab.ProbeKind{vocab.Startup, vocab.Readiness} {
		poke := inst.pokes[kind]
		if poke == nil || !listenTriggers(kind, probeOf(inst.spec, kind), inst.ports, port, opened) {
			continue
		}
		select {
		case poke <- struct{}{}:
		default: // a run is already due
		}
		n++
	}
	return n
}

// probeOf is the container's probe of the kind.
func probeOf(c *v1.Container, kind vocab.ProbeKind) *v1.Probe {
	switch kind {
	case vocab.Startup:
		return c.StartupProbe
	case vocab.Readiness:
		return c.ReadinessProbe
	case vocab.Liveness:
		return c.LivenessProbe
	}
	return nil
}

// listenTriggers decides whether a listener opening or closing on port
// runs the probe of the kind now: startup and readiness probes on that
// port when it opens, readiness probes when it closes.
func listenTriggers(kind vocab.ProbeKind, p *v1.Probe, ports []v1.ContainerPort, port int, opened bool) bool {
	if p == nil || kind == vocab.Liveness || (!opened && kind != vocab.Readiness) {
		return false
	}
	n, ok := ProbePort(p.ProbeHandler, ports)
	return ok && n == port
}

// ProbePort is the TCP port a tcpSocket, httpGet or grpc handler connects
// to, with a named port resolved against the container's ports; false
// for an exec handler or a name that resolves to nothing valid.
func ProbePort(h v1.ProbeHandler, ports []v1.ContainerPort) (int, bool) {
	var p intstr.IntOrString
	switch {
	case h.TCPSocket != nil:
		p = h.TCPSocket.Port
	case h.HTTPGet != nil:
		p = h.HTTPGet.Port
	case h.GRPC != nil:
		p = intstr.FromInt32(h.GRPC.Port)
	default:
		return 0, false
	}
	n, err := resolvePort(p, ports)
	return n, err == nil && n > 0 && n <= 65535
}

// Running reports how many instances are being probed.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.instances)
}

// probing reports whether a probe of the kind runs for the instance.
func (m *Manager) probing(instanceID string, kind vocab.ProbeKind) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	p, ok := m.instances[instanceID]
	return ok && p.kinds[kind] != nil
}

type workers struct {
	m      *Manager
	id     string
	spec   *v1.Container
	target Target
}

// start runs one kind's worker unless the instance or the kind was
// stopped.
func (w *workers) start(kind vocab.ProbeKind, p *v1.Probe) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	inst, ok := w.m.instances[w.id]
	if !ok || inst.stopped[kind] || inst.kinds[kind] != nil {
		return
	}
	ctx, cancel := context.WithCancel(inst.ctx)
	inst.kinds[kind] = cancel
	poke := make(chan struct{}, 1)
	inst.pokes[kind] = poke
	go w.run(ctx, kind, p, poke)
}

// done forgets a worker that ended by itself.
func (w *workers) done(ctx context.Context, kind vocab.ProbeKind) {
	w.m.mu.Lock()
	defer w.m.mu.Unlock()
	if inst, ok := w.m.instances[w.id]; ok && inst.kinds[kind] != nil && ctx.Err() == nil {
		inst.kinds[kind]()
		delete(inst.kinds, kind)
		delete(inst.pokes, kind)
	}
}

func (w *workers) startMain() {
	if p := w.spec.LivenessProbe; p != nil {
		w.start(vocab.Liveness, p)
	}
	if p := w.spec.ReadinessProbe; p != nil {
		w.start(vocab.Readiness, p)
	}
}

// run probes on a timer, and when poked, until the instance stops. Startup
// ends at its first success; liveness and startup pause after a failure
// verdict, since the container is being killed and a new instance gets
// new workers.
//
// Periodic runs fall on a grid shared by every worker (see probeGrid), a
// period apart: the probes of many pods then run in one wake-up of the
// daemon instead of one each, and a wake-up, not the probe, is most of
// what an idle daemon spends (the Go runtime's sysmon alone polls for
// about 10 ms after each one).
func (w *workers) run(ctx context.Context, kind vocab.ProbeKind, p *v1.Probe, poke <-chan struct{}) {
	defer w.done(ctx, kind)
	unit, clk := w.m.TimeUnit, w.m.clock
	period := time.Duration(p.PeriodSeconds) * unit
	grid := probeGrid(period, unit)
	initialDelay := time.Duration(p.InitialDelaySeconds) * unit
	start := clk.Now()
	notBefore := start.Add(initialDelay)
	// The first run waits for the grid time after the initial delay: at
	// most a second, or a tenth of a shorter period (the random jitter
	// this replaces allowed a tenth of any period).
	due := gridAfter(notBefore, grid)
	timer := clk.NewTimer(until(start, due, initialDelay+grid))
	defer timer.Stop()
	c := newCounter(p, kind)
	timeout := time.Duration(p.TimeoutSeconds) * unit
	lastWarning := ""
	// errored: the last run was one the runtime could not make.
	errored := false
	// next arms the timer for the run after the one just made.
	next := func(poked bool) {
		now := clk.Now()
		due = nextDue(due, now, period, grid, poked)
		timer.Reset(until(now, due, period+grid))
	}
	// delayedPoke: the timer is armed for a poke that came during the
	// initial delay, not for a periodic run.
	delayedPoke := false
	for {
		poked := false
		select {
		case <-ctx.Done():
			return
		case <-timer.C():
			poked, delayedPoke = delayedPoke, false
		case <-poke:
			now := clk.Now()
			if wait := notBefore.Sub(now); wait > 0 {
				delayedPoke = true
				timer.Reset(wait) // never before initialDelaySeconds
				continue
			}
			delayedPoke = false
			timer.Stop()
			poked = true
		}
		began := clk.Now()
		raw, err := probe(ctx, w.target, p.ProbeHandler, timeout)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, ErrUnknown) {
			// As the kubelet's worker: the result is thrown away.
			if !errored {
				errored = true
				msg := fmt.Sprintf("%s probe errored and resulted in unknown state: %v", kind, err)
				select {
				case w.m.results <- Result{InstanceID: w.id, Kind: kind, Warning: msg, WarningOnly: true, Errored: true}:
				case <-ctx.Done():
					return
				}
			}
			next(poked)
			continue
		}
		errored = false
		if w.m.Ran != nil {
			w.m.Ran(w.id, kind, err == nil, clk.Now().Sub(began))
		}
		warning := ""
		if raw != "" && raw != lastWarning {
			warning = string(kind) + " probe warning: " + raw
		}
		lastWarning = raw
		changed := c.observe(err == nil)
		if changed || warning != "" {
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			select {
			case w.m.results <- Result{InstanceID: w.id, Kind: kind, OK: err == nil, Message: msg, Warning: warning, WarningOnly: !changed, Listen: poked}:
			case <-ctx.Done():
				return
			}
		}
		if changed {
			switch {
			case kind == vocab.Startup && err == nil:
				w.startMain()
				return
			case kind != vocab.Readiness && err != nil:
				return
			}
		}
		next(poked)
	}
}

// probeGrid is the spacing of the times periodic probes run at: a
// second of probe time, or a tenth of a shorter period, so that moving a
// run to the grid delays it by at most that.
func probeGrid(period, unit time.Duration) time.Duration {
	return max(min(unit, period/10), time.Millisecond)
}

// gridAfter is the first grid time at or after t. The grid is counted
// from the zero time, so every worker shares it.
func gridAfter(t time.Time, grid time.Duration) time.Time {
	g := t.Truncate(grid)
	if g.Before(t) {
		g = g.Add(grid)
	}
	return g
}

// nextDue is when the run after one that ended at now is due. After a
// timed run (due was its time) it is exactly a period later, skipping
// periods an overlong run overlapped, as the kubelet's ticker does. After
// a poked run it is a period after now, moved to the grid.
func nextDue(due, now time.Time, period, grid time.Duration, poked bool) time.Time {
	if poked {
		return gridAfter(now.Add(period), grid)
	}
	if period <= 0 {
		return now
	}
	next := due.Add(period)
	switch {
	case next.Sub(now) > period: // the wall clock went back
		next = gridAfter(now.Add(period), grid)
	case !next.After(now):
		next = due.Add((now.Sub(due)/period + 1) * period)
	}
	return next
}

// until is the wait from now until due, within [0, limit]: the grid is on
// the wall clock, and a wall clock set back or forward must not stall or
// hurry the probes.
func until(now, due time.Time, limit time.Duration) time.Duration {
	return min(max(due.Sub(now), 0), limit)
}
