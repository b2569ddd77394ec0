package controllers

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/schedule/workloads"
)

// The at-most-once property of StatefulSet identities, checked against a
// model of the fleet: the hub is the real pure core (schedule.Schedule,
// applyPlan, silence, the wake-up deadlines) with the bookkeeping of
// SchedulePass (desired generations, acks, mirrors, forgetStopped's
// rule); each device runs the pods of the last desired document it
// received, stops a lease pod once it has not heard from the hub for the
// lease (on its own clock, which runs a little fast or slow) and its
// grace period, and is cut off, crashed, rebooted or fenced in every
// order. No identity may ever run on two devices, and the sets converge
// once the fleet heals.

// event is one thing that happens to the fleet; ok is false when it
// cannot happen in the state given.
type event struct {
	name string
	do   func(w *world) bool
}

func events(n int) []event {
	var out []event
	for i := range n {
		dev := func(w *world) *simDevice { return w.devices[i] }
		name := string(rune('a' + i))
		out = append(out,
			event{"partition " + name, func(w *world) bool {
				d := dev(w)
				if !d.up || !d.link {
					return false
				}
				d.link = false
				return true
			}},
			event{"reconnect " + name, func(w *world) bool {
				d := dev(w)
				if !d.up || d.link {
					return false
				}
				d.link = true
				return true
			}},
			event{"crash " + name, func(w *world) bool {
				d := dev(w)
				if !d.up {
					return false
				}
				d.up, d.link = false, false
				return true
			}},
			// A device that boots cut off runs its last document's pods,
			// but no lease pod: it has not heard from the hub since.
			event{"boot cut off " + name, func(w *world) bool {
				d := dev(w)
				if d.up || d.fenced {
					return false // a fenced device hears the hub before it runs anything
				}
				d.up, d.heardOK = true, false
				for n, p := range d.doc {
					if workloads.LeaseSeconds(p) == 0 {
						d.running[n] = p
					}
				}
				return true
			}},
			event{"boot connected " + name, func(w *world) bool {
				d := dev(w)
				if d.up {
					return false
				}
				d.up, d.link, d.heardOK = true, true, false
				return true
			}},
			// The operator fences only a device that is down: fencing says so.
			event{"fence " + name, func(w *world) bool {
				d := dev(w)
				if d.up || d.fenced || !slices.ContainsFunc(w.devices, func(o *simDevice) bool { return o != d && !o.fenced }) {
					return false // and leaves a device for the sets to run on
				}
				d.fenced = true
				return true
			}},
		)
	}
	for _, dt := range []time.Duration{15 * time.Second, 45 * time.Second, 400 * time.Second} {
		out = append(out, event{"wait " + dt.String(), func(w *world) bool { w.advance(dt); return true }})
	}
	out = append(out, event{"hub restart", func(w *world) bool {
		// The hub is down a minute: nobody hears anybody; then the
		// connected devices come back to it at once.
		w.tick()
		w.now = w.now.Add(time.Minute)
		w.tick()
		w.check("hub down")
		w.started = w.now
		clear(w.readySince)
		return true
	}})
	return out
}

// apply runs one event and a round after it.
func (w *world) apply(e event) bool {
	if !e.do(w) {
		return false
	}
	w.trace = append(w.trace, e.name)
	w.round()
	return true
}

// explore runs every sequence of depth events from w, checking the
// property after each and convergence after healing at the end; it
// returns the sequences run and the first failure.
func explore(w *world, evs []event, depth int) (int, string) {
	if w.violation != "" {
		return 1, fmt.Sprintf("%s after %v", w.violation, w.trace)
	}
	if depth == 0 {
		h := w.clone()
		h.heal()
		if h.violation != "" {
			return 1, fmt.Sprintf("%s while healing after %v", h.violation, w.trace)
		}
		if msg := h.converged(); msg != "" {
			return 1, fmt.Sprintf("no convergence after %v: %s", w.trace, msg)
		}
		return 1, ""
	}
	runs := 0
	for _, e := range evs {
		c := w.clone()
		if !c.apply(e) {
			continue
		}
		n, fail := explore(c, evs, depth-1)
		runs += n
		if fail != "" {
			return runs, fail
		}
	}
	return runs, ""
}

// Clocks: one device 2% slow (the margin's bound), one 2% fast.
var slowFast = [][2]int64{{50, 51}, {51, 50}}

// Every sequence of four events over two devices keeps every
// identity on at most one device, and the sets converge after.
func TestAtMostOnceExhaustive(t *testing.T) {
	depth := 4
	if testing.Short() {
		depth = 3
	}
	w := newWorld(t, slowFast...)
	runs, fail := explore(w, events(2), depth)
	if fail != "" {
		t.Fatal(fail)
	}
	st := w.stats
	t.Logf("%d sequences of %d events: %d force deletions, %d stops confirmed, %d pods moved", runs, depth, st.forced, st.confirmed, st.moved)
	if st.forced == 0 || st.confirmed == 0 || st.moved == 0 {
		t.Fatal("the sequences never forced a deletion, confirmed a stop and moved a pod")
	}
}

// Long random sequences over three devices.
func TestAtMostOnceRandom(t *testing.T) {
	seqs, length := 300, 60
	if testing.Short() {
		seqs = 30
	}
	evs := events(3)
	start := newWorld(t, append(slowFast, [2]int64{1, 1})...)
	r := rand.New(rand.NewPCG(1, 2))
	for s := range seqs {
		w := start.clone()
		for len(w.trace) < length {
			w.apply(evs[r.IntN(len(evs))])
			if w.violation != "" {
				t.Fatalf("sequence %d: %s after %v", s, w.violation, w.trace)
			}
		}
		w.heal()
		if w.violation != "" {
			t.Fatalf("sequence %d: %s while healing after %v", s, w.violation, w.trace)
		}
		if msg := w.converged(); msg != "" {
			t.Fatalf("sequence %d: no convergence after %v: %s", s, w.trace, msg)
		}
	}
}

// The model finds what it looks for: with a device clock slower than the
// margin allows, a cut-off device still runs its lease pod when the hub
// replaces it.
func TestAtMostOnceCatchesASlowClock(t *testing.T) {
	w := newWorld(t, [2]int64{1, 1}, [2]int64{1, 1})
	i := slices.IndexFunc(w.devices, func(d *simDevice) bool { return d.running["lz-0"] != nil })
	d := w.devices[i]
	d.rateNum, d.rateDen = 90, 100
	w.round()
	evs := events(2)
	w.apply(evs[6*i]) // partition it
	w.apply(evs[len(evs)-2])
	if w.violation == "" || !strings.Contains(w.violation, "lz-0") {
		t.Fatalf("no violation found with a 10%% slow clock: %q", w.violation)
	}
	t.Log(w.violation)
}

// A Deployment-style replacement (a new name at once) is what the
// StatefulSet avoids: cut off, its pod is deleted after its toleration
// but not replaced until the device confirms, and replaced at once when
// the operator fences the crashed device.
func TestStatefulSetPodWaitsForItsDevice(t *testing.T) {
	w := newWorld(t, [2]int64{1, 1}, [2]int64{1, 1})
	var d *simDevice
	for _, dev := range w.devices {
		if dev.running["db-0"] != nil {
			d = dev
		}
	}
	d.link = false
	w.advance(400 * time.Second)
	var held *v1.Pod
	for _, p := range w.pods {
		if p.Name == "db-0" {
			held = p
		}
	}
	if w.violation != "" || held == nil || held.DeletionTimestamp == nil || held.Spec.NodeName != d.name {
		t.Fatalf("after 400 s cut off: violation %q, db-0 at the hub %+v", w.violation, held)
	}
	d.up, d.link = false, false
	d.fenced = true
	w.advance(20 * time.Second)
	bound := ""
	for _, p := range w.pods {
		if p.Name == "db-0" && p.DeletionTimestamp == nil {
			bound = p.Spec.NodeName
		}
	}
	if bound == "" || bound == d.name || w.violation != "" {
		t.Fatalf("after the fence: db-0 bound to %q (violation %q)", bound, w.violation)
	}
}
