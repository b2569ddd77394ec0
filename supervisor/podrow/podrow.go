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

// Of computes kubectl's columns: READY counts ready app containers and
// sidecars, STATUS is the most telling reason (init progress first),
// RESTARTS adds when the last one was.
func Of(p *v1.Pod, now time.Time) Row {
	reason := string(p.Status.Phase)
	if p.Status.Reason != "" {
		reason = p.Status.Reason
	}
	var restarts int32
	var lastRestart time.Time
	ready, total := 0, len(p.Spec.Containers)
	noteRestart := func(c v1.ContainerStatus) {
		restarts += c.RestartCount
		if t := c.LastTerminationState.Terminated; t != nil && t.FinishedAt.After(lastRestart) {
			lastRestart = t.FinishedAt.Time
		}
	}
	sidecars := map[string]bool{}
	for _, c := range p.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == v1.ContainerRestartPolicyAlways {
			sidecars[c.Name] = true
			total++
		}
	}
	initializing := false
	for i, c := range p.Status.InitContainerStatuses {
		noteRestart(c)
		if sidecars[c.Name] {
			if c.Started != nil && *c.Started && c.Ready {
				ready++
			}
			continue
		}
		if initializing {
			continue
		}
		switch {
		case c.State.Terminated != nil && c.State.Terminated.ExitCode == 0:
			continue
		case c.State.Terminated != nil && c.State.Terminated.Reason != "":
			reason = "Init:" + c.State.Terminated.Reason
		case c.State.Terminated != nil && c.State.Terminated.Signal != 0:
			reason = fmt.Sprintf("Init:Signal:%d", c.State.Terminated.Signal)
		case c.State.Terminated != nil:
			reason = fmt.Sprintf("Init:ExitCode:%d", c.State.Terminated.ExitCode)
		case c.State.Waiting != nil && c.State.Waiting.Reason != "" && c.State.Waiting.Reason != "PodInitializing" &&
			c.State.Waiting.Reason != "ContainerCreating":
			reason = "Init:" + c.State.Waiting.Reason
		default:
			reason = fmt.Sprintf("Init:%d/%d", i, len(p.Spec.InitContainers))
		}
		initializing = true
	}
	if initializing && p.Status.Reason != "" {
		reason = p.Status.Reason // a failure of the whole pod says more
	}
	hasRunning := false
	cs := p.Status.ContainerStatuses
	for i := len(cs) - 1; i >= 0; i-- {
		c := cs[i]
		noteRestart(c)
		if initializing {
			continue
		}
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
	if p.Status.Reason != "" && (p.Status.Phase == v1.PodFailed || p.Status.Reason == "Invalid") {
		reason = p.Status.Reason
	}
	if reason == "Completed" && hasRunning {
		reason = "NotReady"
		for _, cond := range p.Status.Conditions {
			if cond.Type == v1.PodReady && cond.Status == v1.ConditionTrue {
				reason = "Running"
			}
		}
	}
	if p.DeletionTimestamp != nil {
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
