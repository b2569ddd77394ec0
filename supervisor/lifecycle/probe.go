package lifecycle

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Probed records a probe's verdict, already past its success or failure
// threshold. A failed liveness or startup probe kills the container.
func (m *Machine) Probed(uid types.UID, name, instanceID string, probe ProbeKind, ok bool, msg string, now time.Time) []Action {
	in, c := m.lookup(uid, name, instanceID)
	if c == nil || c.Phase != Running {
		return nil
	}
	// A container being stopped is probed for readiness only (its
	// liveness and startup probes ended with the stop's start).
	if c.Stop != nil && probe != Readiness {
		return nil
	}
	spec := in.Spec(name)
	switch probe {
	case Readiness:
		if c.Ready == ok {
			return nil
		}
		c.Ready = ok
		m.touch(uid)
		if !ok {
			return []Action{record(in, "Warning", "Unhealthy", "Readiness probe failed: "+msg)}
		}
		return nil
	case Startup:
		if ok {
			if !c.StartupPassed {
				c.StartupPassed = true
				m.touch(uid)
			}
			return nil
		}
		return m.probeFailed(in, c, spec.StartupProbe, Startup, msg, now)
	case Liveness:
		if ok {
			return nil
		}
		return m.probeFailed(in, c, spec.LivenessProbe, Liveness, msg, now)
	}
	return nil
}

// probeFailed handles a failed liveness or startup verdict: the kubelet
// records it at once (Unhealthy) and kills the container in its pod's next
// sync, which waits while the pod is busy.
func (m *Machine) probeFailed(in *Instance, c *Container, p *v1.Probe, kind ProbeKind, msg string, now time.Time) []Action {
	acts := []Action{record(in, "Warning", "Unhealthy", string(kind)+" probe failed: "+msg)}
	if in.busy() {
		c.PendingKill = &PendingKill{Probe: kind}
		m.touch(in.UID())
		return acts
	}
	return append(acts, m.probeKill(in, c, p, string(kind), now)...)
}

// probeKill stops a container whose liveness or startup probe failed, with
// the probe's own grace period when it sets one.
func (m *Machine) probeKill(in *Instance, c *Container, p *v1.Probe, what string, now time.Time) []Action {
	grace := m.gracePeriod(in.Pod)
	if p != nil && p.TerminationGracePeriodSeconds != nil {
		grace = time.Duration(*p.TerminationGracePeriodSeconds) * time.Second
	}
	// The kubelet's Killing event names the probe, and says whether a
	// restart follows.
	kill := fmt.Sprintf("Container %s failed %s probe", c.Name, strings.ToLower(what))
	if in.Pod.Spec.RestartPolicy != v1.RestartPolicyNever || c.Kind == SidecarKind {
		kill += ", will be restarted"
	}
	return m.stopContainer(in, c, grace, what+"ProbeFailed", kill, now)
}
