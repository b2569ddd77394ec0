package probes

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod"
)

// Result is a probe verdict that changed, past its threshold, or a
// warning about a probe run (WarningOnly: the verdict did not change).
type Result struct {
	InstanceID string
	Kind       pod.ProbeKind
	OK         bool
	Message    string
	// Warning is the kubelet's ProbeWarning event text ("Liveness probe
	// warning: Probe terminated redirects, ..."), sent when a run warns
	// after one that did not: a probe that keeps warning is not an event
	// every period.
	Warning     string
	WarningOnly bool
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
func initialResult(kind pod.ProbeKind) (verdict, known bool) {
	switch kind {
	case pod.Liveness:
		return true, true
	case pod.Readiness:
		return false, true
	}
	return false, false
}

func newCounter(p *v1.Probe, kind pod.ProbeKind) *counter {
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

// Manager runs the probes of every probed container instance.
type Manager struct {
	// TimeUnit is one "second" of probe settings; tests shorten it.
	TimeUnit time.Duration
	results  chan Result
	ctx      context.Context

	mu      sync.Mutex
	cancels map[string]context.CancelFunc // by instance ID
}

// NewManager returns a manager; its workers stop when ctx ends.
func NewManager(ctx context.Context) *Manager {
	return &Manager{TimeUnit: time.Second, results: make(chan Result, 256), ctx: ctx, cancels: map[string]context.CancelFunc{}}
}

// Results delivers changed verdicts.
func (m *Manager) Results() <-chan Result { return m.results }

// Start probes a container instance: its startup probe first, then its
// liveness and readiness probes once startup succeeded.
func (m *Manager) Start(instanceID string, c *v1.Container, t Target) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.cancels[instanceID]; ok {
		return
	}
	ctx, cancel := context.WithCancel(m.ctx)
	m.cancels[instanceID] = cancel
	w := &workers{m: m, ctx: ctx, id: instanceID, spec: c, target: t}
	if c.StartupProbe != nil {
		go w.run(pod.Startup, c.StartupProbe)
		return
	}
	w.startMain()
}

// Stop ends the probes of an instance.
func (m *Manager) Stop(instanceID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if cancel, ok := m.cancels[instanceID]; ok {
		cancel()
		delete(m.cancels, instanceID)
	}
}

// Running reports how many instances are being probed.
func (m *Manager) Running() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.cancels)
}

type workers struct {
	m      *Manager
	ctx    context.Context
	id     string
	spec   *v1.Container
	target Target
}

func (w *workers) startMain() {
	if p := w.spec.LivenessProbe; p != nil {
		go w.run(pod.Liveness, p)
	}
	if p := w.spec.ReadinessProbe; p != nil {
		go w.run(pod.Readiness, p)
	}
}

// run probes on a timer until the instance stops. Startup ends at its first
// success; liveness and startup pause after a failure verdict, since the
// container is being killed and a new instance gets new workers.
func (w *workers) run(kind pod.ProbeKind, p *v1.Probe) {
	unit := w.m.TimeUnit
	period := time.Duration(p.PeriodSeconds) * unit
	// Spread the first run over a tenth of the period (at most 100ms per
	// second) so that many pods started together do not probe together.
	jitter := time.Duration(rand.Int64N(int64(period/10) + 1))
	timer := time.NewTimer(time.Duration(p.InitialDelaySeconds)*unit + jitter)
	defer timer.Stop()
	c := newCounter(p, kind)
	timeout := time.Duration(p.TimeoutSeconds) * unit
	lastWarning := ""
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-timer.C:
		}
		raw, err := probe(w.ctx, w.target, p.ProbeHandler, timeout)
		if w.ctx.Err() != nil {
			return
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
			case w.m.results <- Result{InstanceID: w.id, Kind: kind, OK: err == nil, Message: msg, Warning: warning, WarningOnly: !changed}:
			case <-w.ctx.Done():
				return
			}
		}
		if changed {
			switch {
			case kind == pod.Startup && err == nil:
				w.startMain()
				return
			case kind != pod.Readiness && err != nil:
				return
			}
		}
		timer.Reset(period)
	}
}
