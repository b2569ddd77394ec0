package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// The wall clock of a small device steps: an RTC-less board boots in 1970
// or 2000 and jumps when NTP answers, an operator sets the date, a battery
// dies. Times the core keeps (in memory or restored from the database)
// may then lie in the future. A future start or finish would make ages
// negative and push restarts and deadlines out by the size of the step, so
// every kept time is at most now, and every wait at most as long as it
// could legitimately be. Steps forward are taken as the kubelet takes
// them: activeDeadlineSeconds counts wall time from status.startTime.

// clampWait returns t, or now+limit if t is further away than that. Waits
// the daemon set itself carry a monotonic reading and compare by it.
func clampWait(t, now time.Time, limit time.Duration) time.Time {
	if at := now.Add(limit); t.After(at) {
		return at
	}
	return t
}

// clampInstance brings every time of an instance that is after now back
// to now. It reports whether anything changed.
func (m *Machine) clampInstance(in *Instance, now time.Time) bool {
	changed := false
	// Shown times compare by the wall clock, which is what they show:
	// a time the daemon took before a step keeps a monotonic reading
	// that would hide the step.
	wall := now.Round(0)
	past := func(t *time.Time) {
		if t.After(wall) {
			*t, changed = now, true
		}
	}
	past(&in.Created)
	past(&in.StartTime)
	past(&in.InitializedAt)
	past(&in.TerminationStart)
	for typ, tr := range in.Transitions {
		if tr.At.After(wall) {
			tr.At, changed = now, true
			in.Transitions[typ] = tr
		}
	}
	for _, c := range in.AllContainers() {
		past(&c.StartedAt)
		past(&c.WaitSince)
		for _, t := range []*Termination{c.Current, c.Last} {
			if t != nil {
				past(&t.StartedAt)
				past(&t.FinishedAt)
			}
		}
		if w := clampWait(c.NotBefore, now, m.cfg.BackoffMax); !w.Equal(c.NotBefore) {
			c.NotBefore, changed = w, true
		}
	}
	// A stop in progress waits at most its longest grace period.
	grace := m.longestGrace(in.Pod)
	if in.Terminating {
		if w := clampWait(in.GraceDeadline, now, grace); !w.Equal(in.GraceDeadline) {
			in.GraceDeadline, changed = w, true
		}
	}
	for _, c := range in.AllContainers() {
		if s := c.Stop; s != nil {
			if w := clampWait(s.Deadline, now, grace); !w.Equal(s.Deadline) {
				s.Deadline, changed = w, true
			}
			if w := clampWait(s.KillAt, now, grace); !w.Equal(s.KillAt) {
				s.KillAt, changed = w, true
			}
		}
	}
	return changed
}

// longestGrace is the longest grace period any stop of the pod may have:
// the pod's, or a probe's own.
func (m *Machine) longestGrace(p *v1.Pod) time.Duration {
	g := max(m.gracePeriod(p), m.cfg.MinGracePeriod)
	for _, c := range append(append([]v1.Container{}, p.Spec.InitContainers...), p.Spec.Containers...) {
		for _, pr := range []*v1.Probe{c.LivenessProbe, c.StartupProbe} {
			if pr != nil && pr.TerminationGracePeriodSeconds != nil {
				g = max(g, time.Duration(*pr.TerminationGracePeriodSeconds)*time.Second)
			}
		}
	}
	return g
}
