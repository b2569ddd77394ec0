package lifecycle

import (
	"fmt"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition reasons, as the kubelet's status generator names them.
const (
	ReasonPodCompleted             = "PodCompleted"
	ReasonPodFailed                = "PodFailed"
	ReasonContainersNotReady       = "ContainersNotReady"
	ReasonContainersNotInitialized = "ContainersNotInitialized"
	ReasonReadinessGatesNotReady   = "ReadinessGatesNotReady"
)

// Transition is when a pod condition last changed status.
type Transition struct {
	Status v1.ConditionStatus `json:"status"`
	At     time.Time          `json:"at"`
}

// conditions derives the pod conditions from the statuses already in st,
// as the kubelet's GeneratePodInitializedCondition,
// GenerateContainersReadyCondition and GeneratePodReadyCondition do. Each
// keeps the time it last changed status (noteConditions records it).
func (m *Machine) conditions(in *Instance, st *v1.PodStatus, now time.Time) []v1.PodCondition {
	cond := func(t v1.PodConditionType, ok bool, reason, msg string) v1.PodCondition {
		s := v1.ConditionFalse
		if ok {
			s = v1.ConditionTrue
		}
		at := now
		if tr, found := in.Transitions[t]; found && tr.Status == s {
			at = tr.At
		}
		return v1.PodCondition{Type: t, Status: s, LastTransitionTime: metav1.NewTime(at), Reason: reason, Message: msg}
	}
	terminal := st.Phase == v1.PodSucceeded || st.Phase == v1.PodFailed

	// The sandbox (the pod's namespaces and network) is gone once the
	// pod finished or was stopped and nothing of it runs.
	sandbox := !((in.Terminating || terminal) && !in.Live())

	initReady, initReason, initMsg := initialized(in, st)

	var unready []string
	for i, cs := range st.InitContainerStatuses {
		if in.Init[i].Kind == SidecarKind && !cs.Ready {
			unready = append(unready, cs.Name)
		}
	}
	for _, cs := range st.ContainerStatuses {
		if !cs.Ready {
			unready = append(unready, cs.Name)
		}
	}
	crReady, crReason, crMsg := len(unready) == 0, "", ""
	switch {
	case st.Phase == v1.PodSucceeded:
		crReady, crReason = false, ReasonPodCompleted
	case st.Phase == v1.PodFailed:
		crReady, crReason = false, ReasonPodFailed
	case !crReady:
		crReason, crMsg = ReasonContainersNotReady, fmt.Sprintf("containers with unready status: %s", unready)
	}

	ready, readyReason, readyMsg := crReady, crReason, crMsg
	if crReady {
		var unmet []string
		for _, g := range in.Pod.Spec.ReadinessGates {
			v, ok := in.Conditions[g.ConditionType]
			switch {
			case !ok:
				unmet = append(unmet, fmt.Sprintf("corresponding condition of pod readiness gate %q does not exist.", g.ConditionType))
			case !v:
				unmet = append(unmet, fmt.Sprintf("the status of pod readiness gate %q is not \"True\", but %v", g.ConditionType, v1.ConditionFalse))
			}
		}
		if len(unmet) > 0 {
			ready, readyReason, readyMsg = false, ReasonReadinessGatesNotReady, strings.Join(unmet, ", ")
		}
	}

	out := []v1.PodCondition{
		cond(v1.PodReadyToStartContainers, sandbox, "", ""),
		cond(v1.PodInitialized, initReady, initReason, initMsg),
		cond(v1.PodReady, ready, readyReason, readyMsg),
		cond(v1.ContainersReady, crReady, crReason, crMsg),
		cond(v1.PodScheduled, true, "", ""),
	}
	for _, g := range in.Pod.Spec.ReadinessGates {
		if v, ok := in.Conditions[g.ConditionType]; ok {
			out = append(out, cond(g.ConditionType, v, "", ""))
		}
	}
	if f := in.Failed; f != nil && f.DisruptionTarget {
		out = append(out, cond(v1.DisruptionTarget, true, v1.PodReasonTerminationByKubelet, f.Message))
	}
	return out
}

// initialized is the kubelet's Initialized condition: True with reason
// PodCompleted for a pod that succeeded, True once an app container ran,
// else False listing the init containers not done (not completed, or a
// sidecar not started).
func initialized(in *Instance, st *v1.PodStatus) (ok bool, reason, msg string) {
	if st.Phase == v1.PodSucceeded {
		return true, ReasonPodCompleted, ""
	}
	for _, cs := range st.ContainerStatuses {
		if cs.State.Running != nil || cs.State.Terminated != nil {
			return true, "", ""
		}
	}
	var incomplete []string
	for i, cs := range st.InitContainerStatuses {
		done := cs.Ready
		if in.Init[i].Kind == SidecarKind {
			done = cs.Started != nil && *cs.Started
		}
		if !done {
			incomplete = append(incomplete, cs.Name)
		}
	}
	if len(incomplete) > 0 {
		return false, ReasonContainersNotInitialized, fmt.Sprintf("containers with incomplete status: %s", incomplete)
	}
	return true, "", ""
}

// noteConditions records when each condition of a changed instance last
// changed status, as the kubelet's status manager keeps lastTransitionTime
// until the status changes.
func (m *Machine) noteConditions(now time.Time) {
	for _, in := range m.instances {
		if in.noted && in.notedRevision == in.revision {
			continue
		}
		changed := false
		st := m.status(in, now)
		for _, c := range st.Conditions {
			if tr, ok := in.Transitions[c.Type]; ok && tr.Status == c.Status {
				continue
			}
			if in.Transitions == nil {
				in.Transitions = map[v1.PodConditionType]Transition{}
			}
			in.Transitions[c.Type] = Transition{Status: c.Status, At: now}
			changed = true
		}
		if changed {
			m.touch(in.UID())
		}
		in.noted, in.notedRevision = true, in.revision
	}
}
