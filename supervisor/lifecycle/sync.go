package lifecycle

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
)

// sync drives one desired instance: init containers in order, then the app
// containers, restarts with backoff, the active deadline, and the end of a
// pod whose app containers are all done.
func (m *Machine) sync(in *Instance, now time.Time) []Action {
	var acts []Action
	if d := in.Pod.Spec.ActiveDeadlineSeconds; d != nil && in.Failed == nil && !in.StartTime.IsZero() && !m.terminal(in) {
		deadline := in.StartTime.Add(time.Duration(*d) * time.Second)
		if !now.Before(deadline) {
			in.Failed = &Failure{Reason: "DeadlineExceeded",
				Message: "Pod was active on the node longer than the specified deadline"}
			m.touch(in.UID())
			acts = append(acts, record(in, "Warning", "DeadlineExceeded", in.Failed.Message))
		} else {
			m.wakeAt(deadline)
		}
	}
	if in.Failed != nil || m.terminal(in) {
		// Nothing restarts; whatever still runs (sidecars, or everything
		// after a deadline) stops as in a termination.
		if in.GraceDeadline.IsZero() {
			in.GraceDeadline = now.Add(m.gracePeriod(in.Pod))
			m.touch(in.UID())
		}
		return append(acts, m.terminate(in, now)...)
	}
	if in.busy() {
		// The kubelet's pod worker is inside one sync: killing a
		// container (its preStop included) or waiting for a postStart
		// hook. Nothing else of the pod starts, restarts or is killed
		// until that returns.
		for _, c := range in.AllContainers() {
			if c.Stop != nil {
				acts = append(acts, m.advanceStop(in, c, now)...)
			}
		}
		return acts
	}
	// Kills a probe asked for while the pod was busy, one at a time as
	// the kubelet kills them in one sync.
	for _, c := range in.AllContainers() {
		if k := c.PendingKill; k != nil && c.Phase == Running && c.Stop == nil {
			c.PendingKill = nil
			spec := in.Spec(c.Name)
			p := spec.LivenessProbe
			if k.Probe == Startup {
				p = spec.StartupProbe
			}
			return append(acts, m.probeKill(in, c, p, string(k.Probe), now)...)
		}
	}
	if !in.Initialized {
		acts = append(acts, m.syncInit(in, now)...)
		if !in.Initialized {
			return acts
		}
	}
	for _, c := range in.Init {
		if c.Kind == SidecarKind {
			acts = append(acts, m.syncContainer(in, c, v1.RestartPolicyAlways, now)...)
		}
	}
	for _, c := range in.Containers {
		acts = append(acts, m.syncContainer(in, c, in.Pod.Spec.RestartPolicy, now)...)
		// A postStart hook holds back the containers after it, as the
		// kubelet starts containers one by one.
		if c.PostStartActive || (c.Phase == Starting && hasPostStart(in.Spec(c.Name))) {
			break
		}
	}
	return acts
}

// syncInit walks the init containers in order: each regular one must
// complete, each sidecar must have started, before the next begins.
func (m *Machine) syncInit(in *Instance, now time.Time) []Action {
	var acts []Action
	for _, c := range in.Init {
		if c.Kind == SidecarKind {
			acts = append(acts, m.syncContainer(in, c, v1.RestartPolicyAlways, now)...)
			if !c.started() {
				return acts
			}
			continue
		}
		if c.Phase == Exited && c.Current.ExitCode == 0 {
			continue
		}
		// An init container restarts on failure unless the pod never
		// restarts anything, in which case its failure fails the pod.
		policy := v1.RestartPolicyOnFailure
		if in.Pod.Spec.RestartPolicy == v1.RestartPolicyNever {
			policy = v1.RestartPolicyNever
		}
		if c.Phase == Exited && policy == v1.RestartPolicyNever {
			// The pod fails; the kubelet gives it no reason or message
			// (kubectl shows Init:Error from the container's state).
			in.Failed = &Failure{}
			m.touch(in.UID())
			return append(acts, m.terminate(in, now)...)
		}
		return append(acts, m.syncContainer(in, c, policy, now)...)
	}
	in.Initialized = true
	in.InitializedAt = now
	m.touch(in.UID())
	return acts
}

// syncContainer starts a waiting container and restarts an exited one per
// policy, after its backoff.
func (m *Machine) syncContainer(in *Instance, c *Container, policy v1.RestartPolicy, now time.Time) []Action {
	switch c.Phase {
	case Running:
		if c.Stop != nil { // a probe or hook failure is stopping it
			return m.advanceStop(in, c, now)
		}
	case Waiting:
		if !c.NotBefore.IsZero() && now.Before(c.NotBefore) {
			m.wakeAt(c.NotBefore)
			return nil
		}
		return []Action{m.start(in, c, now)}
	case Exited:
		if !shouldRestart(policy, c.Current.ExitCode) {
			return nil
		}
		delay := m.backoffDelay(c.BackoffStep)
		c.BackoffStep++
		c.Last, c.Current = c.Current, nil
		c.NotBefore = c.Last.FinishedAt.Add(delay)
		c.Phase = Waiting
		m.touch(in.UID())
		if now.Before(c.NotBefore) {
			m.wakeAt(c.NotBefore)
			return []Action{record(in, "Warning", "BackOff",
				fmt.Sprintf("Back-off %s restarting failed container %s", delay, c.Name))}
		}
		return []Action{m.start(in, c, now)}
	}
	return nil
}

func (m *Machine) start(in *Instance, c *Container, now time.Time) Action {
	c.Attempt++
	c.Phase = Starting
	c.startAsked = now
	c.InstanceID = InstanceID(in.UID(), c.Name, c.Attempt)
	c.NotBefore = time.Time{}
	c.retryAsked = nil
	m.touch(in.UID())
	// At most once: a daemon that dies after the start must find the
	// attempt recorded, or the next one would start it again.
	m.saveFirst[in.UID()] = true
	return Action{Kind: Start, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID, Attempt: c.Attempt, AfterSave: true}
}

// terminal reports whether the app containers are done for good: every one
// exited and none will restart under the pod's policy.
func (m *Machine) terminal(in *Instance) bool {
	if !in.Initialized || len(in.Containers) == 0 {
		return false
	}
	for _, c := range in.Containers {
		if c.Phase != Exited || shouldRestart(in.Pod.Spec.RestartPolicy, c.Current.ExitCode) {
			return false
		}
	}
	return true
}

// backoffDelay is the wait before restart number step+1: none for the first
// restart, then BackoffInitial doubling up to BackoffMax.
func (m *Machine) backoffDelay(step int) time.Duration {
	if step == 0 {
		return 0
	}
	d := m.cfg.BackoffInitial
	for i := 1; i < step && d < m.cfg.BackoffMax; i++ {
		d *= 2
	}
	return min(d, m.cfg.BackoffMax)
}

func shouldRestart(policy v1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

func hasPostStart(c *v1.Container) bool {
	return c.Lifecycle != nil && c.Lifecycle.PostStart != nil
}
