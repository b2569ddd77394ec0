// Package lifecycle is podvisor's pure core: from the desired pods, what the
// runtimes reported and the current time it decides which containers to
// start, stop and kill, and derives every pod's Kubernetes status.
//
// Nothing here performs I/O or reads a clock. The daemon feeds observations
// in, executes the returned actions and calls back at NextWake.
package lifecycle

import (
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Config holds the tunables of restart backoff and termination.
type Config struct {
	// BackoffInitial is the delay before the second restart; the first
	// restart is immediate, as the kubelet does in practice.
	BackoffInitial time.Duration
	// BackoffMax caps the doubling delay.
	BackoffMax time.Duration
	// BackoffReset is how long a container must run cleanly for its
	// backoff to start over.
	BackoffReset time.Duration
	// MinGracePeriod is the shortest grace a stop ever gets (the kubelet's
	// minimumGracePeriodInSeconds).
	MinGracePeriod time.Duration
}

// DefaultConfig returns the kubelet's values: 10s doubling to 300s, reset
// after 10 minutes, 2s minimum grace.
func DefaultConfig() Config {
	return Config{
		BackoffInitial: 10 * time.Second,
		BackoffMax:     300 * time.Second,
		BackoffReset:   10 * time.Minute,
		MinGracePeriod: 2 * time.Second,
	}
}

// ContainerPhase is where one container of a pod instance is in its cycle.
type ContainerPhase string

const (
	// Waiting: not started yet, or waiting to be restarted.
	Waiting ContainerPhase = "Waiting"
	// Starting: a start action was issued and has not been answered.
	Starting ContainerPhase = "Starting"
	// Running: the runtime reported the process started.
	Running ContainerPhase = "Running"
	// Exited: the last instance terminated and no restart is pending yet.
	Exited ContainerPhase = "Exited"
)

// Termination describes one finished container instance.
type Termination struct {
	InstanceID string    `json:"instanceID"`
	ExitCode   int32     `json:"exitCode"`
	Signal     int32     `json:"signal,omitempty"`
	Reason     string    `json:"reason"`
	Message    string    `json:"message,omitempty"`
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt"`
}

// Container is the core's memory of one container of a pod instance.
type Container struct {
	Name  string         `json:"name"`
	Phase ContainerPhase `json:"phase"`
	// Attempt counts the instances started so far; it names log files.
	Attempt      int          `json:"attempt"`
	RestartCount int32        `json:"restartCount"`
	InstanceID   string       `json:"instanceID,omitempty"`
	StartedAt    time.Time    `json:"startedAt,omitzero"`
	Current      *Termination `json:"current,omitempty"` // set while Exited
	Last         *Termination `json:"last,omitempty"`    // lastState
	// BackoffStep counts restarts since the last reset; NotBefore is the
	// earliest time the next restart may happen.
	BackoffStep int       `json:"backoffStep"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	// Stopping is set once a stop signal went out; KillAt is when the grace
	// period runs out and KillSent whether SIGKILL followed.
	Stopping bool      `json:"stopping,omitempty"`
	KillAt   time.Time `json:"killAt,omitzero"`
	KillSent bool      `json:"killSent,omitempty"`
}

// Instance is one incarnation of a pod: a UID. A changed manifest is a new
// instance; the old one must be fully terminated before the new one starts.
type Instance struct {
	Pod        *v1.Pod      `json:"pod"`
	Created    time.Time    `json:"created"`
	StartTime  time.Time    `json:"startTime,omitzero"`
	Containers []*Container `json:"containers"`
	// Terminating is set when the instance is no longer desired.
	Terminating      bool      `json:"terminating,omitempty"`
	TerminationStart time.Time `json:"terminationStart,omitzero"`
	GraceDeadline    time.Time `json:"graceDeadline,omitzero"`

	revision uint64 // bumped on every change; not persisted
}

// Revision changes whenever the instance does, so views of it can be
// cached.
func (in *Instance) Revision() uint64 { return in.revision }

// UID returns the instance's pod UID.
func (in *Instance) UID() types.UID { return in.Pod.UID }

// Key returns namespace/name, the identity that must never have two live
// instances.
func (in *Instance) Key() string { return KeyOf(in.Pod) }

// KeyOf returns namespace/name of a pod.
func KeyOf(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// Container returns the named container record, or nil.
func (in *Instance) Container(name string) *Container {
	for _, c := range in.Containers {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// live reports whether any container has a process or a start in flight.
func (in *Instance) live() bool {
	for _, c := range in.Containers {
		if c.Phase == Running || c.Phase == Starting {
			return true
		}
	}
	return false
}

// ActionKind says what the daemon must do.
type ActionKind string

const (
	// Start a container instance (InstanceID and Attempt are set).
	Start ActionKind = "Start"
	// Stop sends the stop signal; the daemon kills at KillAt if still running.
	Stop ActionKind = "Stop"
	// Kill sends SIGKILL to the container's whole process tree.
	Kill ActionKind = "Kill"
	// Forget removes a fully terminated, undesired instance.
	Forget ActionKind = "Forget"
	// Record is a Kubernetes-style event for describe and the log.
	Record ActionKind = "Record"
)

// Action is one instruction for the I/O shell.
type Action struct {
	Kind       ActionKind
	Pod        types.UID
	Container  string
	InstanceID string
	Attempt    int
	// Event fields (Kind == Record).
	EventType string // Normal or Warning
	Reason    string
	Message   string
}
