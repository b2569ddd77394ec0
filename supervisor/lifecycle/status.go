package lifecycle

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodView returns the instance as a v1.Pod with its full status at now.
func (m *Machine) PodView(in *Instance, now time.Time) *v1.Pod {
	p := in.Pod.DeepCopy()
	p.CreationTimestamp = metav1.NewTime(in.Created)
	if in.Terminating {
		ts := metav1.NewTime(in.TerminationStart)
		p.DeletionTimestamp = &ts
		grace := int64(max(in.GraceDeadline.Sub(in.TerminationStart), 0) / time.Second)
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
	for _, c := range in.Init {
		st.InitContainerStatuses = append(st.InitContainerStatuses, m.containerStatus(in, c, now))
	}
	for _, c := range in.Containers {
		st.ContainerStatuses = append(st.ContainerStatuses, m.containerStatus(in, c, now))
	}
	st.Phase = m.phase(in, st)
	if in.Failed != nil {
		st.Reason, st.Message = in.Failed.Reason, in.Failed.Message
	}
	st.Conditions = m.conditions(in, &st, now)
	return st
}

func (m *Machine) containerStatus(in *Instance, c *Container, now time.Time) v1.ContainerStatus {
	spec := in.Spec(c.Name)
	cs := v1.ContainerStatus{Name: c.Name, Image: spec.Image, RestartCount: c.RestartCount}
	phase := c.Phase
	if phase == Running && c.PostStartActive {
		// The kubelet's status is the one from before it created the
		// container until its postStart hook returns: still waiting,
		// with the previous instance's restart count.
		phase = Starting
		if c.Last != nil {
			cs.RestartCount--
		}
	}
	switch phase {
	case Running:
		cs.ContainerID = ContainerIDPrefix + c.InstanceID
		cs.State.Running = &v1.ContainerStateRunning{StartedAt: metav1.NewTime(c.StartedAt)}
		// Readiness is the probe's verdict while the container runs,
		// terminating or not, as the kubelet's prober keeps it.
		cs.Ready = c.started() && c.Ready
		if c.Kind == InitKind {
			cs.Ready = false
		}
	case Exited:
		cs.ContainerID = ContainerIDPrefix + c.Current.InstanceID
		cs.State.Terminated = terminated(c.Current)
		// A completed init container is "ready" in the kubelet's sense.
		cs.Ready = c.Kind == InitKind && c.Current.ExitCode == 0
	case Starting, Waiting:
		// The kubelet's default waiting state: PodInitializing in a pod
		// with init containers, for them and the app containers alike.
		w := &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
		if len(in.Pod.Spec.InitContainers) > 0 {
			w.Reason = "PodInitializing"
		}
		switch {
		case c.Phase == Waiting && (c.WaitReason == FailedMount || c.WaitReason == ObjectsPending):
			// The kubelet says nothing of volumes in a container's
			// state: the pod's FailedMount events do; nor of objects
			// on their way (it would have them).
		case c.Phase == Waiting && c.WaitReason != "":
			w.Reason, w.Message = c.WaitReason, c.WaitMessage
			// After the first failed pull, the kubelet says it is
			// backing off.
			if c.WaitReason == ErrImagePull && c.FailStep > 1 {
				w.Reason = ImagePullBackOff
				w.Message = fmt.Sprintf("Back-off pulling image %q: %s", spec.Image, c.WaitMessage)
			}
		case c.Phase == Waiting && c.Last != nil && now.Before(c.NotBefore):
			w.Reason = "CrashLoopBackOff"
			w.Message = fmt.Sprintf("back-off %s restarting failed container=%s pod=%s_%s(%s)",
				m.backoffDelay(c.BackoffStep-1), c.Name, in.Pod.Name, in.Pod.Namespace, in.Pod.UID)
		}
		cs.State.Waiting = w
	}
	started := c.started()
	cs.Started = &started
	if c.Last != nil {
		cs.LastTerminationState.Terminated = terminated(c.Last)
	}
	return cs
}

// Waiting reasons of pulls, as the kubelet names them.
const (
	ErrImagePull      = "ErrImagePull"
	ErrImageNeverPull = "ErrImageNeverPull"
	ImagePullBackOff  = "ImagePullBackOff"
)

// CreateContainerConfigError is a container whose configuration (its
// environment's ConfigMaps and Secrets, its subPaths) could not be made:
// the kubelet's waiting reason.
const CreateContainerConfigError = "CreateContainerConfigError"

// ObjectsPending is a start that waits, quietly, for hub objects the
// device was told of and has not received yet (runtime.ObjectsPending is
// the same word): the container shows its default waiting state.
const ObjectsPending = "ObjectsPending"

// FailedMount is a start that waits for the pod's volumes (the kubelet's
// event reason; runtime.FailedMount is the same word): the container
// shows its default waiting state.
const FailedMount = "FailedMount"

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

// phase follows the kubelet's getPhase: Pending until initialized, Failed
// when the pod failed as a whole, then by the app containers, where one
// waiting to restart after a termination counts as stopped, and the
// sidecars: a running one keeps the pod Running (a pod whose app
// containers are done is Succeeded or Failed only once its sidecars
// stopped), one never started keeps it Pending.
func (m *Machine) phase(in *Instance, st v1.PodStatus) v1.PodPhase {
	if in.Failed != nil {
		return v1.PodFailed
	}
	if !in.Initialized {
		return v1.PodPending
	}
	var waiting, running, stopped, succeeded int
	for i, cs := range st.InitContainerStatuses {
		if in.Init[i].Kind != SidecarKind {
			continue
		}
		switch {
		case cs.State.Running != nil:
			running++
		case cs.State.Waiting != nil && cs.LastTerminationState.Terminated == nil:
			waiting++
		}
	}
	for _, cs := range st.ContainerStatuses {
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
	policy := in.Pod.Spec.RestartPolicy
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
