package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// watchEnv is the environment variable (metadata.name, by the downward
// API) that marks a hub pod's processes for an identityWatch.
const watchEnv = "SAFETY_POD"

// seenProc is one process of a marked pod, as /proc showed it.
type seenProc struct {
	pid    int
	pod    string
	device string
	// start is when the process started (from /proc/PID/stat, to the
	// clock tick); last is the last sample that saw it alive.
	start, last time.Time
	gone        bool
}

func (p seenProc) String() string {
	return fmt.Sprintf("%s pid %d on %s started %s last seen alive %s", p.pod, p.pid, p.device,
		p.start.Format("15:04:05.000"), p.last.Format("15:04:05.000"))
}

// identityWatch samples /proc every 100 ms for the processes of the hub
// pods (watchEnv in their environment), each attributed to its device
// by its cgroup (the daemon's cgroup root): the devices' own truth. It
// records every process it saw and every sample where one pod name was
// live on two devices at once.
type identityWatch struct {
	t      *testing.T
	roots  map[string]string // cgroup root name -> device
	mu     sync.Mutex
	procs  map[int]*seenProc
	twice  []string
	exempt map[string]time.Time // device -> since when its copies are not counted
	stop   chan struct{}
	done   chan struct{}
}

// watchIdentities starts the watch on the fleet's daemons until the
// test ends (or check is called).
func watchIdentities(t *testing.T, daemons map[string]*daemon) *identityWatch {
	w := &identityWatch{t: t, roots: map[string]string{}, procs: map[int]*seenProc{},
		exempt: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	for id, d := range daemons {
		w.roots[fmt.Sprintf("podvisor-e2e-%d-%s", os.Getpid(), filepath.Base(d.dir))] = id
	}
	go func() {
		defer close(w.done)
		for {
			w.sample()
			select {
			case <-w.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *identityWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// check stops the watch and fails the test if an identity ran on two
// devices at once.
func (w *identityWatch) check() {
	w.t.Helper()
	w.halt()
	if len(w.twice) > 0 {
		w.t.Errorf("a pod ran on two devices at once (%d samples), first: %s", len(w.twice), strings.Join(w.twice[:min(len(w.twice), 5)], "; "))
	}
}

// exemptDevice stops counting device's copies started before now: the
// operator declared it dead (fenced) while the test knows it is not, to
// see its daemon stop them when it returns.
func (w *identityWatch) exemptDevice(device string) {
	w.mu.Lock()
	w.exempt[device] = time.Now()
	w.mu.Unlock()
}

func (w *identityWatch) sample() {
	now := time.Now()
	seen := map[int]bool{}
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, p := range procs {
		env, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(env, []byte(watchEnv+"=")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if exited(pid) {
			continue
		}
		w.mu.Lock()
		sp := w.procs[pid]
		w.mu.Unlock()
		if sp == nil {
			sp = &seenProc{pid: pid, start: procStart(pid)}
			for _, kv := range bytes.Split(env, []byte{0}) {
				if name, ok := bytes.CutPrefix(kv, []byte(watchEnv+"=")); ok {
					sp.pod = string(name)
				}
			}
		}
		if sp.device == "" {
			sp.device = w.deviceOf(pid)
		}
		if sp.device == "" || sp.start.IsZero() {
			continue // not yet in its pod's cgroup: the next sample
		}
		sp.last = now
		seen[pid] = true
		w.mu.Lock()
		w.procs[pid] = sp
		w.mu.Unlock()
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	on := map[string]map[string]bool{}
	for pid, sp := range w.procs {
		if !seen[pid] {
			sp.gone = true
			continue
		}
		if at, ok := w.exempt[sp.device]; ok && sp.start.Before(at) {
			continue
		}
		if on[sp.pod] == nil {
			on[sp.pod] = map[string]bool{}
		}
		on[sp.pod][sp.device] = true
	}
	for pod, devices := range on {
		if len(devices) > 1 {
			w.twice = append(w.twice, fmt.Sprintf("%s %s on %v", now.Format("15:04:05.000"), pod, keys(devices)))
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// deviceOf is the device whose cgroup root holds pid ("" if none).
func (w *identityWatch) deviceOf(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return ""
	}
	for root, id := range w.roots {
		if bytes.Contains(b, []byte("/"+root+"/")) {
			return id
		}
	}
	return ""
}

// procStart is when pid started, on the wall clock: its start time in
// clock ticks since boot (/proc/PID/stat field 22) against
// CLOCK_BOOTTIME now.
func procStart(pid int) time.Time {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return time.Time{}
	}
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}
	}
	f := strings.Fields(string(stat[i+1:])) // f[0] is field 3 (state)
	if len(f) < 20 {
		return time.Time{}
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}
	}
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_BOOTTIME, &ts) != nil {
		return time.Time{}
	}
	sinceStart := time.Duration(ts.Nano()) - time.Duration(ticks)*10*time.Millisecond // USER_HZ is 100
	return time.Now().Add(-sinceStart)
}

// copies are the processes seen of pod on device (device "": anywhere),
// oldest first.
func (w *identityWatch) copies(pod, device string) []seenProc {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []seenProc
	for _, sp := range w.procs {
		if (pod == "" || sp.pod == pod) && (device == "" || sp.device == device) {
			out = append(out, *sp)
		}
	}
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && out[j].start.Before(out[j-1].start); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}

// live are the live processes of pod on device ("": any).
func (w *identityWatch) live(pod, device string) []seenProc {
	var out []seenProc
	for _, sp := range w.copies(pod, device) {
		if !sp.gone {
			out = append(out, sp)
		}
	}
	return out
}
