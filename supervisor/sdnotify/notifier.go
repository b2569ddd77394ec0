// Package sdnotify is what the daemon tells its service manager through
// systemd's notify protocol (sd_notify(3)): READY=1 once its start-up is
// over, STATUS= lines a person reads in `systemctl status`, WATCHDOG=1
// from the daemon's loop, and STOPPING=1. Notifier decides what to send and
// when from the times and facts the loop gives it, and does no I/O; Socket
// sends.
package sdnotify

import (
	"fmt"
	"strings"
	"time"
)

// StatusGap is the least time between two looks at the status: a busy
// daemon sends at most one line a second, and the one it settles on
// within a second.
const StatusGap = time.Second

// Facts are what a running daemon's status line tells. The loop gathers
// them only when a line is due.
type Facts struct {
	// Pods is every pod the daemon shows, finished ones included.
	Pods int
	// NotReady are the pods not finished whose Ready condition is not
	// True.
	NotReady int
	// Finished are the pods Succeeded or Failed.
	Finished int
	// Rejected are the manifest files rejected.
	Rejected int
	// Draining: a drain (or a node shutdown) stops the pods.
	Draining bool
	// Hub is the hub connection (nil: no hub configured).
	Hub *Hub
}

// Hub is how the daemon stands with its hub.
type Hub struct {
	// Connected: the device is connected to the hub's broker.
	Connected bool
	// Since is when it connected or lost the connection, or first failed
	// to connect (zero: not connected yet, and no attempt failed).
	Since time.Time
	// Generation is the hub's desired document in force (0: none yet).
	Generation int64
}

type phase int

const (
	// recovering: the daemon restores its records and adopts what runs.
	recovering phase = iota
	// starting: the loop runs, and waits for runtimes that reconnect to
	// have their containers adopted.
	starting
	// running: READY was sent.
	running
	// stopping: the daemon is stopping (STOPPING).
	stopping
)

// Notifier decides the messages. Its methods are for one goroutine: the
// daemon's start-up, then its loop.
type Notifier struct {
	// watchdog is the service manager's watchdog period (0: none): a
	// ping is due every half of it.
	watchdog time.Duration
	phase    phase
	// adopted of toAdopt pods whose running containers were adopted
	// while recovering.
	adopted, toAdopt int
	// awaiting are the runtimes whose pods are not adopted yet, waited
	// for until awaitUntil.
	awaiting   []string
	awaitUntil time.Time
	// stopPods: stopping stops the pods (else it leaves them running);
	// reloading: it restarts into another version (RELOADING=1).
	stopPods, stoppingSent, reloading bool
	pinged                            time.Time
	// status is the last line sent, looked at lookedAt; stale: it may
	// have changed since.
	status   string
	lookedAt time.Time
	stale    bool
}

// New returns a notifier for a service manager whose watchdog period is
// watchdog (0: no watchdog), recovering.
func New(watchdog time.Duration) *Notifier {
	return &Notifier{watchdog: watchdog, stale: true}
}

// Recovering reports the start-up's progress: adopted of total pods found
// running have been adopted.
func (n *Notifier) Recovering(adopted, total int) {
	n.adopted, n.toAdopt, n.stale = adopted, total, true
}

// Supervising says the loop runs at now. READY is due once no runtime in
// awaiting (those holding pods that wait for the runtime to reconnect) is
// left, or after wait.
func (n *Notifier) Supervising(now time.Time, awaiting []string, wait time.Duration) {
	n.phase, n.awaiting, n.awaitUntil, n.stale = starting, awaiting, now.Add(wait), true
}

// Adopted says a runtime's containers were adopted.
func (n *Notifier) Adopted(runtime string) {
	for i, r := range n.awaiting {
		if r == runtime {
			n.awaiting = append(n.awaiting[:i:i], n.awaiting[i+1:]...)
			n.stale = true
			return
		}
	}
}

// Stopping says the daemon stops, stopping its pods or leaving them.
func (n *Notifier) Stopping(stopPods bool) {
	n.phase, n.stopPods, n.stale = stopping, stopPods, true
}

// Reloading says the daemon ends to execute another version in this
// process (the self-update), leaving its pods running: RELOADING=1 instead
// of STOPPING=1, as the next daemon sends READY=1 again.
func (n *Notifier) Reloading() {
	n.phase, n.reloading, n.stale = stopping, true, true
}

// Changed says the status may have changed (the loop took a step).
func (n *Notifier) Changed() { n.stale = true }

// Step returns the message due at now ("" for none): READY=1 when the
// start-up is over, STOPPING=1 when the stop begins, the status line when
// it changed (at most every StatusGap, at once with READY or STOPPING)
// and a watchdog ping every half period once the loop runs. facts is
// called only when a running or stopping daemon's line is due.
func (n *Notifier) Step(now time.Time, facts func() Facts) string {
	var lines []string
	forced := false
	if n.phase == starting && (len(n.awaiting) == 0 || !now.Before(n.awaitUntil)) {
		n.phase, forced = running, true
		lines = append(lines, "READY=1")
	}
	if n.phase == stopping && !n.stoppingSent {
		n.stoppingSent, forced = true, true
		if n.reloading {
			lines = append(lines, "RELOADING=1")
			n.pinged = time.Time{} // a ping with it: the next daemon has a whole period to start
		} else {
			lines = append(lines, "STOPPING=1")
		}
	}
	if n.stale && (forced || n.lookedAt.IsZero() || now.Sub(n.lookedAt) >= StatusGap) {
		n.stale, n.lookedAt = false, now
		if s := n.text(now, facts); s != n.status {
			n.status = s
			lines = append(lines, "STATUS="+s)
		}
	}
	if n.watchdog > 0 && n.phase != recovering && (n.pinged.IsZero() || now.Sub(n.pinged) >= n.watchdog/2) {
		n.pinged = now
		lines = append(lines, "WATCHDOG=1")
	}
	return strings.Join(lines, "\n")
}

// Next is when Step has something to do next (zero: nothing before the
// next change): a ping, a line held back by StatusGap, or the end of the
// wait for runtimes.
func (n *Notifier) Next() time.Time {
	var next time.Time
	earliest := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	if n.phase == recovering {
		return next
	}
	if n.watchdog > 0 {
		earliest(n.pinged.Add(n.watchdog / 2))
	}
	if n.stale {
		earliest(n.lookedAt.Add(StatusGap))
	}
	if n.phase == starting && len(n.awaiting) > 0 {
		earliest(n.awaitUntil)
	}
	return next
}

// text is the status line of the phase at now.
func (n *Notifier) text(now time.Time, facts func() Facts) string {
	switch n.phase {
	case recovering:
		if n.toAdopt == 0 {
			return "recovering: restoring pod records"
		}
		return fmt.Sprintf("recovering: adopted %d of %s", n.adopted, count(n.toAdopt, "pod"))
	case starting:
		return "recovering: waiting for " + strings.Join(n.awaiting, ", ") + " to adopt its pods"
	case stopping:
		f := facts()
		if n.reloading {
			return fmt.Sprintf("restarting into a new version: leaving %s running", count(f.Pods-f.Finished, "pod"))
		}
		if n.stopPods {
			return fmt.Sprintf("stopping: %s left", count(f.Pods-f.Finished, "pod"))
		}
		return fmt.Sprintf("stopping: leaving %s running", count(f.Pods-f.Finished, "pod"))
	}
	line := runningLine(now, facts())
	if len(n.awaiting) > 0 { // READY went at the wait's end
		line += ", waiting for " + strings.Join(n.awaiting, ", ")
	}
	return line
}

// runningLine is a running daemon's line at now: "running 12 pods (2 not
// ready, 1 finished), 1 manifest rejected, draining; hub connected,
// generation 7".
func runningLine(now time.Time, f Facts) string {
	var b strings.Builder
	b.WriteString("running " + count(f.Pods, "pod"))
	var notes []string
	if f.NotReady > 0 {
		notes = append(notes, fmt.Sprintf("%d not ready", f.NotReady))
	}
	if f.Finished > 0 {
		notes = append(notes, fmt.Sprintf("%d finished", f.Finished))
	}
	if len(notes) > 0 {
		b.WriteString(" (" + strings.Join(notes, ", ") + ")")
	}
	if f.Rejected > 0 {
		b.WriteString(", " + count(f.Rejected, "manifest") + " rejected")
	}
	if f.Draining {
		b.WriteString(", draining")
	}
	if f.Hub != nil {
		b.WriteString("; " + hubLine(now, *f.Hub))
	}
	return b.String()
}

// hubLine is "hub connected, generation 7", "hub unreachable since 10:42"
// (with the date when not today), or "hub connecting" before the first
// connection or failure; the generation is left out before the first
// document.
func hubLine(now time.Time, h Hub) string {
	var s string
	switch {
	case h.Connected:
		s = "hub connected"
	case h.Since.IsZero():
		s = "hub connecting"
	default:
		since := h.Since.In(now.Location())
		layout := "15:04"
		if y, m, d := since.Date(); y != now.Year() || m != now.Month() || d != now.Day() {
			layout = "Jan 2 15:04"
		}
		s = "hub unreachable since " + since.Format(layout)
	}
	if h.Generation > 0 {
		s += fmt.Sprintf(", generation %d", h.Generation)
	}
	return s
}

func count(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}
