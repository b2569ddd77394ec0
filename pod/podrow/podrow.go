// Package podrow computes the columns kubectl prints for a pod (READY,
// STATUS, RESTARTS, AGE), for podvisor's and podhub's tables.
package podrow

import (
	"fmt"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/duration"
)

// Row is a pod's kubectl columns.
type Row struct{ Ready, Status, Restarts, Age string }

// Of computes kubectl's columns as its printPod does: READY counts ready
// app containers and started sidecars, STATUS is the most telling reason
// (init progress first), RESTARTS counts the init containers while the
// pod initializes, else the app containers and sidecars, and adds when
// the last restart was.
//
// One difference: a Failed pod with a reason (Evicted, DeadlineExceeded,
// Terminated by a drain) shows that reason rather than its containers'.
func Of(p *v1.Pod, now time.Time) Row {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	restarts, sidecarRestarts := int32(0), int32(0)
	var lastRestart, lastSidecarRestart time.Time
	later := func(t *time.Time, c v1.ContainerStatus) {
		if lt := c.LastTerminationState.Terminated; lt != nil && lt.FinishedAt.After(*t) {
			*t = lt.FinishedAt.Time
		}
	}
	ready, total := 0, len(p.Spec.Containers)
	sidecars := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
			total++
		}
	}
	initializing := false
	for i, c := range p.Status.InitContainerStatuses {
		restarts += c.RestartCount
		later(&lastRestart, c)
		if sidecars[c.Name] {
			sidecarRestarts += c.RestartCount
			later(&lastSidecarRestart, c)
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case sidecars[c.Name] && c.Started != nil && *c.Started:
			if c.Ready {
				ready++
			}
			continue
		case c.State.Terminated != nil && c.State.Terminated.Reason != "":
			reason = "Init:" + c.State.Terminated.Reason
		case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
			reason = fmt.Sprintf("Init:Signal:%d", c.State.Terminated.Signal)
		case c.State.Terminated != nil:
			reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing":
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		initializing = true
		break
	}
	if !initializing || condition(p, v1.PodInitialized) {
		restarts, lastRestart = sidecarRestarts, lastSidecarRestart
		hasRunning := false
		cs := p.Status.ContainerStatuses
		for i := len(cs) - 1; i >= 0; i-- {
			c := cs[i]
			restarts += c.RestartCount
			later(&lastRestart, c)
			switch {
			case c.State.Waiting != nil && c.State.Waiting.Reason != "":
				reason = c.State.Waiting.Reason
			case c.State.Terminated != nil && c.State.Terminated.Reason != "":
				reason = c.State.Terminated.Reason
			case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
				reason = fmt.Sprintf("Signal:%d", c.State.Terminated.Signal)
			case c.State.Terminated != nil:
				reason = fmt.Sprintf("ExitCode:%d", c.State.Terminated.ExitCode)
			case c.Ready && c.State.Running != nil:
				hasRunning = true
				ready++
			}
		}
		// Back to Running if a container still runs.
		if reason == "Completed" && hasRunning {
			reason = "NotReady"
			if condition(p, v1.PodReady) {
				reason = "Running"
			}
		}
	}
	if p.Status.Reason != "" && p.Status.Phase == v1.PodFailed {
		reason = p.Status.Reason
	}
	if p.DeletionTimestamp != nil && p.Status.Phase != v1.PodSucceeded && p.Status.Phase != v1.PodFailed {
		reason = "Terminating"
	}
	r := Row{
		Ready:    fmt.Sprintf("%d/%d", ready, total),
		Status:   reason,
		Restarts: fmt.Sprint(restarts),
		Age:      duration.HumanDuration(now.Sub(p.CreationTimestamp.Time)),
	}
	if restarts > 0 && !lastRestart.IsZero() {
		r.Restarts = fmt.Sprintf("%d (%s ago)", restarts, duration.HumanDuration(now.Sub(lastRestart)))
	}
	return r
}

// condition reports whether the pod's condition of the type is True.
func condition(p *v1.Pod, typ v1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}
