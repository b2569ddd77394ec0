package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// realWatch follows the real device through the update from outside:
// whether its API answers (every 10 ms), its download files (every
// 50 ms), and its update reports as the hub stores them (every 200 ms).
type realWatch struct {
	r     *realMember
	files string
	quit  chan struct{}
	done  sync.WaitGroup

	mu        sync.Mutex
	ordered   time.Time        // its first download directory seen
	parts     map[string]int64 // each download file's largest size seen
	down      []span           // the API's stretches without an answer
	downSince time.Time        // zero: answering
	slowest   time.Duration    // the slowest answer
	apiFailed int              // requests failed otherwise (timeouts)
	apiErr    string           // the first of them
	phases    map[string]time.Time
	committed *protocol.UpdateState
}

type span struct{ from, to time.Time }

func startRealWatch(r *realMember, files string) *realWatch {
	w := &realWatch{r: r, files: files, quit: make(chan struct{}), parts: map[string]int64{}, phases: map[string]time.Time{}}
	w.done.Add(3)
	go w.every(10*time.Millisecond, w.api)
	go w.every(50*time.Millisecond, w.downloads)
	go w.every(200*time.Millisecond, w.hub)
	return w
}

func (w *realWatch) every(d time.Duration, f func()) {
	defer w.done.Done()
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-w.quit:
			return
		case <-t.C:
			f()
		}
	}
}

func (w *realWatch) stop() {
	select {
	case <-w.quit:
		return
	default:
	}
	close(w.quit)
	w.done.Wait()
}

// api notes the stretches when nothing listens on the daemon's API
// socket (from the first request refused to the first answered), and
// the slowest answer and the other failures (timeouts: a loaded machine
// or a busy daemon, not one that is away).
func (w *realWatch) api() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	sent := time.Now()
	_, err := w.r.client.Version(ctx)
	took := time.Since(sent)
	cancel()
	// The client says so when the socket refuses or is not there.
	away := err != nil && strings.Contains(err.Error(), "no podvisor daemon is listening")
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case away && w.downSince.IsZero():
		w.downSince = sent
	case err == nil && !w.downSince.IsZero():
		w.down = append(w.down, span{w.downSince, sent})
		w.downSince = time.Time{}
	case err != nil && !away:
		w.apiFailed++
		if w.apiErr == "" {
			w.apiErr = err.Error()
		}
	}
	if err == nil {
		w.slowest = max(w.slowest, took)
	}
}

// downloads notes when the order arrived (its download directory made)
// and how far each download file grew.
func (w *realWatch) downloads() {
	dirs, _ := filepath.Glob(filepath.Join(w.r.data, "agent", "download", "*"))
	parts, _ := filepath.Glob(filepath.Join(w.r.data, "agent", "download", "*", "*.part"))
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(dirs) > 0 && w.ordered.IsZero() {
		w.ordered = now
	}
	for _, p := range parts {
		if fi, err := os.Stat(p); err == nil {
			w.parts[p] = max(w.parts[p], fi.Size())
		}
	}
}

// hub notes when the hub first showed each of the device's phases, and
// its Committed report.
func (w *realWatch) hub() {
	var d fleetdb.Device
	if err := w.r.ph.client.Do("GET", "/v1/devices/"+w.r.id, nil, &d); err != nil || d.Update == nil {
		return
	}
	now := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.phases[d.Update.Phase]; !seen {
		w.phases[d.Update.Phase] = now
	}
	if d.Update.Phase == protocol.UpdateCommitted && w.committed == nil {
		w.committed = d.Update
	}
}

func (w *realWatch) received() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.receivedLocked()
}

// heartbeats are the heartbeat container's timestamps.
func heartbeats(path string) ([]time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// Whole lines only: the last may be a write under way.
	data = data[:bytes.LastIndexByte(data, '\n')+1]
	var out []time.Time
	for _, line := range strings.Fields(string(data)) {
		ns, err := strconv.ParseInt(line, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %q is no timestamp", path, line)
		}
		out = append(out, time.Unix(0, ns))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out, nil
}

// maxGap is the longest time between two heartbeats in [from, to],
// counting from and to themselves as the window's edges.
// It returns where the gap ends too.
func maxGap(beats []time.Time, from, to time.Time) (time.Duration, time.Time) {
	var gap time.Duration
	var at time.Time
	last := from
	for _, b := range beats {
		if b.Before(from) {
			continue
		}
		if b.After(to) {
			break
		}
		if b.Sub(last) > gap {
			gap, at = b.Sub(last), b
		}
		last = b
	}
	if to.Sub(last) > gap {
		gap, at = to.Sub(last), to
	}
	return gap, at
}

// realReport checks the real device after the update and prints its
// numbers: its own update's time, the daemon's unavailability, the bytes
// it received, and its pods' downtime — 0 only when every container kept
// its process and the heartbeat shows no stop.
func realReport(r *realMember, wire int64) error {
	w := r.watch
	w.stop()
	w.hub() // the update may have completed between two looks
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.committed == nil || w.ordered.IsZero() {
		return fmt.Errorf("the real device: no order seen (%v) or no Committed report (%v); its log ends:\n%s", w.ordered, w.committed, lastLines(r.log.String(), 30))
	}
	committedAt := w.committed.Time
	after, err := r.containers(r.watch.files)
	if err != nil {
		return fmt.Errorf("the real device after its update: %w", err)
	}
	byKey := map[string]container{}
	for _, c := range after {
		byKey[c.pod+"/"+c.name] = c
	}
	var changed []string
	for _, b := range r.before {
		a, ok := byKey[b.pod+"/"+b.name]
		switch {
		case !ok:
			changed = append(changed, b.pod+": gone")
		case a.id != b.id || !a.started.Equal(b.started) || a.restarts != b.restarts:
			changed = append(changed, fmt.Sprintf("%s: container %s started %s restarts %d, was %s %s %d", b.pod, a.id, a.started, a.restarts, b.id, b.started, b.restarts))
		case a.pid != b.pid || a.pidStart != b.pidStart || procStart(b.pid) != b.pidStart:
			changed = append(changed, fmt.Sprintf("%s: process %d (start %s), was %d (start %s)", b.pod, a.pid, a.pidStart, b.pid, b.pidStart))
		}
	}
	// The update's window, from the order to a second after the commit,
	// and as long a window before it, the heartbeat's own jitter on this
	// machine (the same run: the peer of the update's gap).
	from, to := w.ordered, committedAt.Add(time.Second)
	time.Sleep(time.Until(to.Add(2 * heartbeatPeriod))) // its beats written
	beats, err := heartbeats(filepath.Join(w.files, "heartbeat"))
	if err != nil || len(beats) == 0 {
		return fmt.Errorf("the real device's heartbeat: %v (%d beats)", err, len(beats))
	}
	gap, gapEnd := maxGap(beats, from, to)
	baseFrom := from.Add(-to.Sub(from))
	if baseFrom.Before(beats[0]) {
		baseFrom = beats[0]
	}
	baseGap, _ := maxGap(beats, baseFrom, from)
	var longest, total time.Duration
	for _, s := range w.down {
		longest = max(longest, s.to.Sub(s.from))
		total += s.to.Sub(s.from)
	}
	if !w.downSince.IsZero() {
		return fmt.Errorf("the real device's API does not answer since %s", w.downSince.Format(time.TimeOnly))
	}
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", r.cmd.Process.Pid))
	fmt.Printf("  the real device (podvisor of this tree, %s -> %s, %d process pods, run by the bench, not systemd):\n", updateFrom, updateTo, len(r.before))
	fmt.Printf("    order taken (download begun) -> Committed reported     %8.2f s\n", committedAt.Sub(w.ordered).Seconds())
	if t, ok := w.phases[protocol.UpdateRestarting]; ok {
		fmt.Printf("    (the hub showed Restarting %.2f s after the order)\n", t.Sub(w.ordered).Seconds())
	}
	fmt.Printf("    daemon's API socket refusing connections (the exec)      %8.3f s  (%d stretches, longest %.3f s; asked every 10 ms)\n",
		total.Seconds(), len(w.down), longest.Seconds())
	fmt.Printf("    (its slowest answer over the run %.3f s; %d requests failed otherwise%s)\n", w.slowest.Seconds(), w.apiFailed, firstErr(w.apiErr))
	fmt.Printf("    artifact bytes received                                %6.1f MiB (the release's %s wire size %.1f MiB)\n",
		float64(w.receivedLocked())/(1<<20), r.Arch(), float64(wire)/(1<<20))
	fmt.Printf("    daemon PID %d throughout, now runs %s\n", r.cmd.Process.Pid, strings.TrimPrefix(exe, r.dir+"/"))
	fmt.Printf("    heartbeat container (every %v): longest gap %.0f ms during the update (ending %.2f s after the order), %.0f ms in as long a window before it\n",
		heartbeatPeriod, gap.Seconds()*1000, gapEnd.Sub(w.ordered).Seconds(), baseGap.Seconds()*1000)
	var phases []string
	for p, t := range w.phases {
		phases = append(phases, fmt.Sprintf("%s +%.2fs", p, t.Sub(w.ordered).Seconds()))
	}
	sort.Strings(phases)
	var stretches []string
	for _, s := range w.down {
		stretches = append(stretches, fmt.Sprintf("+%.2fs for %.3fs", s.from.Sub(w.ordered).Seconds(), s.to.Sub(s.from).Seconds()))
	}
	fmt.Printf("    (the hub first showed, after the order: %s; the API did not answer at %s)\n", strings.Join(phases, ", "), strings.Join(stretches, ", "))
	// A stopped container leaves a gap of at least the time it was
	// stopped: a gap under a second (ten periods) with every process
	// unchanged is scheduling jitter on a loaded machine, not a stop.
	if len(changed) > 0 || gap > time.Second {
		fmt.Printf("    pod downtime: NOT 0 — heartbeat gap %.2f s; containers changed: %s\n", gap.Seconds(), strings.Join(changed, "; "))
		return fmt.Errorf("the real device's pods did not run through the update untouched")
	}
	fmt.Printf("    pod downtime                                           %8d s  (%d containers, same PIDs, same container IDs and start times, no restarts)\n", 0, len(r.before))
	return nil
}

func firstErr(e string) string {
	if e == "" {
		return ""
	}
	return ", the first: " + e
}

func (w *realWatch) receivedLocked() int64 {
	var n int64
	for _, size := range w.parts {
		n += size
	}
	return n
}
