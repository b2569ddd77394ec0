package supervisor

import (
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/podview"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/sdnotify"
)

// RuntimeAdoptWait bounds how long READY waits, after the records are
// restored, for a runtime that reconnects (containerd) to list the
// containers of the pods it held: a containerd that does not come back
// must not keep the service from starting. Its pods are adopted whenever
// it does.
const RuntimeAdoptWait = 30 * time.Second

// serviceManager tells the service manager (systemd, Type=notify) how the
// daemon is: sdnotify decides, the socket sends. Without one (plan nil)
// nothing is decided, sent or woken for.
type serviceManager struct {
	// ready closes when the start-up is over, as READY=1 says, with or
	// without a service manager (the self-update's commit gate waits
	// for it); awaiting are the runtimes it still waits for.
	ready     chan struct{}
	readyOnce sync.Once
	// readyNext: the start-up is over, ready closes after the loop's next
	// step, once the API's view shows what the daemon adopted (the loop's
	// own goroutine sets and reads it).
	readyNext bool
	awaiting  []string
	plan      *sdnotify.Notifier
	socket    *sdnotify.Socket
	log       *slog.Logger
	failed    bool // a send failed: logged once
	// seen is what the status line was last computed from: the view's
	// version and the drain; the line is looked at again only when it
	// moved, so a step that changed nothing wakes nothing.
	seen struct {
		version    uint64
		draining   bool
		generation int64
		link       hubLink
	}
	// link is the hub connection as the uplink last told it (HubLink, on
	// its own goroutine); linked wakes the loop to look at it.
	linkMu sync.Mutex
	link   hubLink
	linked chan struct{}
}

// hubLink is the hub connection's state: told is false until the uplink
// says anything (no hub, or not yet).
type hubLink struct {
	told, connected bool
	since           time.Time
}

// hubLink returns the link as last told.
func (m *serviceManager) hubLink() hubLink {
	m.linkMu.Lock()
	defer m.linkMu.Unlock()
	return m.link
}

// linkWake is what the loop waits on for the hub link's changes (nil
// without a service manager: never ready).
func (m *serviceManager) linkWake() <-chan struct{} { return m.linked }

func newServiceManager(s *sdnotify.Socket, log *slog.Logger) *serviceManager {
	if s == nil {
		return &serviceManager{ready: make(chan struct{})}
	}
	return &serviceManager{ready: make(chan struct{}), plan: sdnotify.New(s.Watchdog), socket: s, log: log,
		linked: make(chan struct{}, 1)}
}

func (m *serviceManager) markReady() { m.readyOnce.Do(func() { close(m.ready) }) }

// stepped is called by the loop after each step: a start-up that ended
// before it is ready now, the view published.
func (m *serviceManager) stepped() {
	if m.readyNext {
		m.readyNext = false
		m.markReady()
	}
}

// Ready closes once the daemon's start-up is over: its state restored,
// the pods found running adopted (a reconnecting runtime's awaited at most
// RuntimeAdoptWait) and the API listening; READY=1 goes to systemd then.
func (d *Daemon) Ready() <-chan struct{} { return d.service.ready }

// tell sends what is due at now; facts are read only if a line is due.
func (m *serviceManager) tell(now time.Time, facts func() sdnotify.Facts) {
	msg := m.plan.Step(now, facts)
	if msg == "" {
		return
	}
	if strings.Contains(msg, "RELOADING=1") {
		// systemd (v253+) pairs a reload with the READY that ends it by
		// this clock.
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
			msg += fmt.Sprintf("\nMONOTONIC_USEC=%d", ts.Nano()/1000)
		}
	}
	if err := m.socket.Send(msg); err != nil && !m.failed {
		m.failed = true
		m.log.Warn("cannot notify the service manager", "err", err)
	}
}

// tellService is the loop's step toward the service manager: the status
// may have changed, and what is due (a ping among it) is sent from the
// loop itself, so a loop that hangs stops the pings and systemd restarts
// the daemon. It returns the earlier of next and the service's next wake.
func (d *Daemon) tellService(next time.Time) time.Time {
	m := d.service
	if m.plan == nil {
		return next
	}
	_, version, _ := d.view.Pods()
	draining, generation, link := d.protector.Draining(), d.hubGeneration(), m.hubLink()
	if version != m.seen.version || draining != m.seen.draining || generation != m.seen.generation ||
		link.told != m.seen.link.told || link.connected != m.seen.link.connected || !link.since.Equal(m.seen.link.since) {
		m.seen.version, m.seen.draining, m.seen.generation, m.seen.link = version, draining, generation, link
		m.plan.Changed()
	}
	m.tell(d.now(), d.serviceFacts)
	if at := m.plan.Next(); !at.IsZero() && (next.IsZero() || at.Before(next)) {
		return at
	}
	return next
}

// recovering reports the adoption's progress during the start-up.
func (d *Daemon) recovering(adopted, total int) {
	if d.service.plan == nil {
		return
	}
	d.service.plan.Recovering(adopted, total)
	d.service.tell(d.now(), d.serviceFacts)
}

// supervising hands the service's start-up to the loop: READY waits for
// the runtimes that reconnect and hold restored pods to list what they
// run (recoverRuntime), at most RuntimeAdoptWait.
func (d *Daemon) supervising() {
	var awaiting []string
	for _, class := range d.runtimes.Classes() {
		rt := d.runtimes.Named(class)
		if _, ok := rt.(runtime.Reconnecting); ok && d.holdsPods(rt) {
			awaiting = append(awaiting, class)
		}
	}
	m := d.service
	m.awaiting = append([]string(nil), awaiting...)
	if len(awaiting) == 0 {
		m.readyNext = true // after the first step: the view is published there
	} else {
		time.AfterFunc(RuntimeAdoptWait, m.markReady)
	}
	if m.plan == nil {
		return
	}
	m.plan.Supervising(d.now(), awaiting, RuntimeAdoptWait)
}

// holdsPods reports whether rt runs a pod the machine knows.
func (d *Daemon) holdsPods(rt runtime.Runtime) bool {
	for _, in := range d.machine.Instances() {
		if d.runtimes.Of(in.Pod) == rt {
			return true
		}
	}
	return false
}

// runtimeAdopted says a runtime that reconnects listed its containers.
func (d *Daemon) runtimeAdopted(rt runtime.Runtime) {
	m := d.service
	for _, class := range d.runtimes.Classes() {
		if d.runtimes.Named(class) != rt {
			continue
		}
		for i, a := range m.awaiting {
			if a == class {
				m.awaiting = append(m.awaiting[:i:i], m.awaiting[i+1:]...)
				if len(m.awaiting) == 0 {
					m.readyNext = true // once the step shows what it adopted
				}
				break
			}
		}
		if m.plan != nil {
			m.plan.Adopted(class)
		}
	}
}

// stopping tells the service manager the daemon stops (STOPPING=1), before
// any pod is stopped or left.
func (d *Daemon) stopping() {
	if d.service.plan == nil {
		return
	}
	if d.restarting.Load() {
		d.service.plan.Reloading() // the same PID comes back as a new daemon: RELOADING, then READY
	} else {
		d.service.plan.Stopping(d.cfg.StopPodsOnExit)
	}
	d.service.tell(d.now(), d.serviceFacts)
}

// HubLink implements Assignments: the connection's state is kept for the
// status line, and the loop woken to send it. It never waits for the
// loop (the uplink's goroutine calls it, before Run too).
func (h hubSide) HubLink(connected bool, since time.Time) {
	m := h.d.service
	if m.plan == nil {
		return // no service manager to tell (set once, in New)
	}
	m.linkMu.Lock()
	m.link = hubLink{told: true, connected: connected, since: since}
	m.linkMu.Unlock()
	select {
	case m.linked <- struct{}{}:
	default: // a wake is pending already
	}
}

// hubGeneration is the hub's desired document in force (0: none, or no
// hub): the generation of the last document the daemon took.
func (d *Daemon) hubGeneration() int64 {
	if !d.desired.HubAttached() {
		return 0
	}
	return d.desired.FenceGeneration() // every document sets it, fence or not
}

// serviceFacts counts the published pods for the status line.
func (d *Daemon) serviceFacts() sdnotify.Facts {
	pods, _, _ := d.view.Pods()
	f := sdnotify.Facts{Draining: d.protector.Draining()}
	if link := d.service.hubLink(); link.told {
		f.Hub = &sdnotify.Hub{Connected: link.connected, Since: link.since, Generation: d.hubGeneration()}
	} else if d.desired.HubAttached() {
		f.Hub = &sdnotify.Hub{Generation: d.hubGeneration()} // connecting
	}
	for _, p := range pods {
		switch {
		case p.Status.Reason == podview.StatusInvalid && p.UID == "":
			f.Rejected++
			continue
		case p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed:
			f.Finished++
		case !podReady(p):
			f.NotReady++
		}
		f.Pods++
	}
	return f
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
