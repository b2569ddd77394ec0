package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
)

// terminate stops an instance as the kubelet's killPod does: every
// container's stop begins at once (Killing event, preStop hook), but a
// sidecar's stop signal waits for its turn: until every app container
// (and a running init container) and every sidecar after it has exited.
// Once the grace deadline has passed, whatever still runs is signalled at
// once, with the minimum grace before SIGKILL.
func (m *Machine) terminate(in *Instance, now time.Time) []Action {
	var acts []Action
	appsLive := false
	for _, c := range in.AllContainers() {
		if c.Kind == SidecarKind {
			continue
		}
		if c.Phase == Waiting {
			c.NotBefore = time.Time{} // no restart is coming
			continue
		}
		if c.live() {
			appsLive = true
			acts = append(acts, m.stopContainer(in, c, in.GraceDeadline.Sub(now), "Terminating", "", now)...)
			m.shorten(c, in.GraceDeadline, now)
		}
	}
	past := !now.Before(in.GraceDeadline)
	laterLive := appsLive
	for i := len(in.Init) - 1; i >= 0; i-- {
		c := in.Init[i]
		if c.Kind != SidecarKind || !c.live() {
			continue
		}
		acts = append(acts, m.beginStop(in, c, in.GraceDeadline.Sub(now), "Terminating", "", now)...)
		m.shorten(c, in.GraceDeadline, now)
		if held := laterLive && !past; c.Stop.Held != held {
			c.Stop.Held = held
			m.touch(in.UID())
		}
		acts = append(acts, m.advanceStop(in, c, now)...)
		laterLive = true
	}
	return acts
}

// stopContainer begins (or continues) stopping one container with the
// given grace period. message is the Killing event's, "Stopping container
// <name>" when empty, as the kubelet's killContainer says.
func (m *Machine) stopContainer(in *Instance, c *Container, grace time.Duration, reason, message string, now time.Time) []Action {
	acts := m.beginStop(in, c, grace, reason, message, now)
	return append(acts, m.advanceStop(in, c, now)...)
}

// beginStop records a container's stop, once: its Killing event, and the
// end of its liveness and startup probes.
func (m *Machine) beginStop(in *Instance, c *Container, grace time.Duration, reason, message string, now time.Time) []Action {
	var acts []Action
	if message == "" {
		message = "Stopping container " + c.Name
	}
	if c.Stop == nil {
		c.Stop = &Stop{Reason: reason, Deadline: now.Add(max(grace, 0)), Force: in.Force}
		m.touch(in.UID())
		// As the kubelet's StopLivenessAndStartup: liveness and startup
		// end here, readiness keeps probing (and may turn the container
		// unready) until the container exits.
		acts = append(acts,
			Action{Kind: Unprobe, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID, Probes: []ProbeKind{Liveness, Startup}},
			record(in, "Normal", "Killing", message))
	}
	return acts
}

// advanceStop moves a stop along: preStop hook, stop signal once the hook
// is done or the deadline passed, SIGKILL when the grace runs out. The
// time the hook took comes off the grace, but the signal always gets at
// least MinGracePeriod before SIGKILL.
func (m *Machine) advanceStop(in *Instance, c *Container, now time.Time) []Action {
	s := c.Stop
	if c.Phase != Running {
		return nil // a start in flight is stopped once it is answered
	}
	if s.Force {
		if s.KillSent {
			return nil
		}
		s.KillSent = true
		m.touch(in.UID())
		return []Action{{Kind: Kill, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID}}
	}
	spec := in.Spec(c.Name)
	var acts []Action
	// As the kubelet, a preStop hook runs only while grace remains.
	if !s.PreStopRan && spec.Lifecycle != nil && spec.Lifecycle.PreStop != nil && now.Before(s.Deadline) {
		s.PreStopRan, s.PreStopActive = true, true
		m.touch(in.UID())
		// The kubelet stops waiting for the hook at the deadline but
		// leaves an exec hook running until its container dies.
		timeout := s.Deadline.Sub(now)
		if spec.Lifecycle.PreStop.Exec != nil {
			timeout = 0
		}
		acts = append(acts, Action{Kind: RunHook, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID,
			Hook: PreStop, Timeout: timeout})
	}
	if (s.PreStopActive || s.Held) && now.Before(s.Deadline) {
		m.wakeAt(s.Deadline)
		return acts
	}
	if !s.SignalSent {
		s.SignalSent, s.PreStopActive = true, false
		s.KillAt = s.Deadline
		if minimum := now.Add(m.cfg.MinGracePeriod); s.KillAt.Before(minimum) {
			s.KillAt = minimum
		}
		m.touch(in.UID())
		acts = append(acts, Action{Kind: Signal, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID,
			Signal: stopSignal(spec)})
	}
	if !s.KillSent {
		if now.Before(s.KillAt) {
			m.wakeAt(s.KillAt)
			return acts
		}
		s.KillSent = true
		m.touch(in.UID())
		acts = append(acts,
			record(in, "Warning", "Killing", "Grace period expired: killing container "+c.Name),
			Action{Kind: Kill, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID})
	}
	return acts
}

// shorten brings a stop's deadline forward, never back.
func (m *Machine) shorten(c *Container, deadline, now time.Time) {
	s := c.Stop
	if s == nil || !deadline.Before(s.Deadline) {
		return
	}
	s.Deadline = deadline
	if s.SignalSent && !s.KillSent && deadline.Before(s.KillAt) {
		s.KillAt = deadline
		if deadline.Before(now) {
			s.KillAt = now
		}
	}
}

// stopSignal is the container's configured stop signal, SIGTERM by default.
func stopSignal(c *v1.Container) string {
	if c.Lifecycle != nil && c.Lifecycle.StopSignal != nil {
		return string(*c.Lifecycle.StopSignal)
	}
	return "SIGTERM"
}
