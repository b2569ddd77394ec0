package lifecycle

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ContainerIDPrefix is the runtime scheme in containerID fields.
const ContainerIDPrefix = "process://"

// PodView returns the instance as a v1.Pod with its full status at now.
func (m *Machine) PodView(in *Instance, now time.Time) *v1.Pod {
	p := in.Pod.DeepCopy()
	p.CreationTimestamp = metav1.NewTime(in.Created)
	if in.Terminating {
		ts := metav1.NewTime(in.TerminationStart)
		p.DeletionTimestamp = &ts
		grace := int64(in.GraceDeadline.Sub(in.TerminationStart) / time.Second)
		p.DeletionGracePeriodSeconds = &grace
	}
	p.Status = m.status(in, now)
	return p
}

func (m *Machine) status(in *Instance, now time.Time) v1.PodStatus {
	st := v1.PodStatus{QOSClass: QOSClass(in.Pod)}
	if !in.StartTime.IsZero() {
		t := metav1.NewTime(in.StartTime)
		st.StartTime = &t
	}
	allReady := len(in.Containers) > 0
	for i, c := range in.Containers {
		cs := m.containerStatus(in, i, c, now)
		if !cs.Ready {
			allReady = false
		}
		st.ContainerStatuses = append(st.ContainerStatuses, cs)
	}
	st.Phase = phase(in.Pod.Spec.RestartPolicy, st.ContainerStatuses)
	if in.Terminating {
		allReady = false
	}
	created := metav1.NewTime(in.Created)
	readyTime := created
	cond := func(t v1.PodConditionType, ok bool, reason string) v1.PodCondition {
		s := v1.ConditionFalse
		if ok {
			s = v1.ConditionTrue
		}
		return v1.PodCondition{Type: t, Status: s, LastTransitionTime: readyTime, Reason: reason}
	}
	notReady := ""
	if !allReady {
		notReady = "ContainersNotReady"
	}
	if st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed {
		notReady = "PodCompleted"
	}
	st.Conditions = []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, !in.Terminating || in.live(), ""),
		cond(v1.PodInitialized, true, ""),
		cond(v1.PodReady, allReady, notReady),
		cond(v1.ContainersReady, allReady, notReady),
		cond(v1.PodScheduled, true, ""),
	}
	return st
}

func (m *Machine) containerStatus(in *Instance, i int, c *Container, now time.Time) v1.ContainerStatus {
	spec := in.Pod.Spec.Containers[i]
	cs := v1.ContainerStatus{
		Name:         c.Name,
		Image:        spec.Image,
		RestartCount: c.RestartCount,
	}
	started := false
	switch c.Phase {
	case Running:
		cs.ContainerID = ContainerIDPrefix + c.InstanceID
		cs.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
		started = true
		// Readiness probes arrive with the probes package; until then a
		// running container that is not being stopped is ready.
		cs.Ready = !c.Stopping
	case Exited:
		cs.ContainerID = ContainerIDPrefix + c.Current.InstanceID
		cs.State.Terminated = terminated(c.Current)
	case Starting:
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
	case Waiting:
		w := &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
		if c.Last != nil && now.Before(c.NotBefore) {
			w.Reason = "CrashLoopBackOff"
			w.Message = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
				m.backoffDelay(c.BackoffStep-1), c.Name, in.Pod.Name, in.Pod.Namespace, in.Pod.UID)
		}
		if in.Terminating {
			w.Reason, w.Message = "PodTerminating", ""
		}
		cs.State.Waiting = w
	}
	cs.Started = &started
	if c.Last != nil {
		cs.LastTerminationState.Terminated = terminated(c.Last)
	}
	return cs
}

func terminated(t *Termination) *v1.ContainerStateTerminated {
	return &v1.ContainerStateTerminated{
		ExitCode:    t.ExitCode,
		Signal:      t.Signal,
		Reason:      t.Reason,
		Message:     t.Message,
		StartedAt:   metav1.NewTime(t.StartedAt),
		FinishedAt:  metav1.NewTime(t.FinishedAt),
		ContainerID: ContainerIDPrefix + t.InstanceID,
	}
}

// phase follows the kubelet's getPhase for regular containers: a container
// waiting to restart after a termination counts as stopped.
func phase(policy v1.RestartPolicy, statuses []v1.ContainerStatus) v1.PodPhase {
	var waiting, running, stopped, succeeded int
	for _, cs := range statuses {
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Terminated != nil:
			stopped++
			if cs.State.Terminated.ExitCode == 0 {
				succeeded++
			}
		case cs.LastTerminationState.Terminated != nil:
			stopped++
		default:
			waiting++
		}
	}
	switch {
	case waiting > 0:
		return v1.PodPending
	case running > 0:
		return v1.PodRunning
	case stopped > 0:
		switch {
		case policy == v1.RestartPolicyAlways:
			return v1.PodRunning
		case stopped == succeeded:
			return v1.PodSucceeded
		case policy == v1.RestartPolicyOnFailure:
			return v1.PodRunning
		default:
			return v1.PodFailed
		}
	}
	return v1.PodPending
}

// QOSClass computes the pod's QoS class as the API server does: Guaranteed
// when every container has equal cpu and memory requests and limits,
// BestEffort when none has any, Burstable otherwise.
func QOSClass(p *v1.Pod) v1.PodQOSClass {
	hasAny, guaranteed := false, true
	for _, c := range p.Spec.Containers {
		for _, r := range []v1.ResourceName{v1.ResourceCPU, v1.ResourceMemory} {
			req, hasReq := c.Resources.Requests[r]
			lim, hasLim := c.Resources.Limits[r]
			if hasReq || hasLim {
				hasAny = true
			}
			if !hasLim || (hasReq && req.Cmp(lim) != 0) {
				guaranteed = false
			}
		}
	}
	switch {
	case !hasAny:
		return v1.PodQOSBestEffort
	case guaranteed:
		return v1.PodQOSGuaranteed
	default:
		return v1.PodQOSBurstable
	}
}
