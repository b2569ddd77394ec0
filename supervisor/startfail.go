package supervisor

import (
	"errors"
	"time"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// startOutcome is how a start ended, as the core must hear it.
type startOutcome struct {
	Kind startKind
	// Created: why the container waits (the kubelet's waiting reason).
	Reason, Message string
	// RemoveLeftover: the runtime holds something of the failed
	// instance, to remove once its end is saved.
	RemoveLeftover bool
	// Exit is a failed start's end (Failed).
	Exit lifecycle.Termination
}

type startKind int

const (
	// startRan: the instance runs (Machine.Started).
	startRan startKind = iota
	// startNotCreated: nothing was created; the container waits with a
	// reason and no restart is counted (Machine.StartFailed).
	startNotCreated
	// startFailed: it was created but did not run: it ends with exit
	// code 128, StartError, and a restart is counted (Machine.Exited).
	startFailed
)

// classifyStart sorts a runtime's start report, as the kubelet does: a
// container the runtime could not create waits (CreateContainerError,
// ErrImagePull, …); one that was created but failed to run is a
// terminated StartError.
func classifyStart(s runtime.Started, instanceID string, now time.Time) startOutcome {
	var create *runtime.CreateError
	switch {
	case s.Err == nil:
		return startOutcome{Kind: startRan}
	case errors.As(s.Err, &create):
		return startOutcome{Kind: startNotCreated, Reason: create.Reason, Message: create.Message, RemoveLeftover: s.Leftover}
	}
	return startOutcome{Kind: startFailed, Exit: lifecycle.Termination{
		InstanceID: instanceID, ExitCode: 128, Reason: "StartError", Message: s.Err.Error(),
		StartedAt: now, FinishedAt: now}}
}
