// Package lifecycle is podvisor's pure core: from the desired pods, what the
// runtimes and probes reported and the current time it decides which
// containers to start, stop and kill, which hooks to run, and derives every
// pod's Kubernetes status.
//
// Nothing here performs I/O or reads a clock. The daemon feeds observations
// in and asks for a Ready at each step: it saves the records the Ready
// names, then executes its actions, then hands it back through Advance, and
// asks again at the Ready's NextWake.
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
	// MinGracePeriod is the shortest time between a stop signal and
	// SIGKILL (the kubelet's minimumGracePeriodInSeconds).
	MinGracePeriod time.Duration
	// SaveDelay batches the saves no action waits on: flash storage
	// wears per write (0: every Ready saves every change).
	SaveDelay time.Duration
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

// WakeIn is how long a shell's timer waits for a wake-up at at: none
// (zero) waits an hour, a past one not at all. (With Go's timers since
// 1.23, Reset alone drops a value a stopped timer held.)
func WakeIn(at, now time.Time) time.Duration {
	if at.IsZero() {
		return time.Hour
	}
	return max(at.Sub(now), 0)
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

// ContainerKind says how a container takes part in the pod's lifecycle.
type ContainerKind string

const (
	// InitKind runs to completion, in order, before anything after it.
	InitKind ContainerKind = "Init"
	// SidecarKind is an init container with restartPolicy Always: it
	// starts in order and keeps running beside the app containers.
	SidecarKind ContainerKind = "Sidecar"
	// RegularKind is an app container.
	RegularKind ContainerKind = "Regular"
)

// Stop is a container's way out: optional preStop hook, stop signal, and
// SIGKILL when the grace period runs out.
type Stop struct {
	Reason   string    `json:"reason"`
	Deadline time.Time `json:"deadline"` // end of the grace period
	// Force skips the hook and the signal: SIGKILL at once.
	Force         bool      `json:"force,omitempty"`
	PreStopRan    bool      `json:"preStopRan,omitempty"`
	PreStopActive bool      `json:"preStopActive,omitempty"`
	SignalSent    bool      `json:"signalSent,omitempty"`
	KillAt        time.Time `json:"killAt,omitzero"`
	KillSent      bool      `json:"killSent,omitempty"`
	// Held keeps a sidecar's stop signal back until its turn: until the
	// app containers and the sidecars after it have exited.
	Held bool `json:"held,omitempty"`
}

// Container is the core's memory of one container of a pod instance.
type Container struct {
	Name  string         `json:"name"`
	Kind  ContainerKind  `json:"kind"`
	Phase ContainerPhase `json:"phase"`
	// Attempt counts the instances started so far; it names instances
	// and log files.
	Attempt int `json:"attempt"`
	// RestartCount is the restart count of the newest instance that was
	// created, as the kubelet labels each container it creates: the
	// N+1th instance gets N. A creation that failed does not count.
	RestartCount int32        `json:"restartCount"`
	InstanceID   string       `json:"instanceID,omitempty"`
	StartedAt    time.Time    `json:"startedAt,omitzero"`
	Current      *Termination `json:"current,omitempty"` // set while Exited
	Last         *Termination `json:"last,omitempty"`    // lastState
	// BackoffStep counts restarts since the last reset; NotBefore is the
	// earliest time the next restart may happen.
	BackoffStep int       `json:"backoffStep"`
	NotBefore   time.Time `json:"notBefore,omitzero"`
	// PostStartActive is set while the postStart hook runs: the container
	// counts as not started and blocks the containers after it.
	PostStartActive bool `json:"postStartActive,omitempty"`
	// PendingKill is a failed liveness or startup probe whose kill waits
	// until the pod is no longer busy (Instance.busy).
	PendingKill *PendingKill `json:"pendingKill,omitempty"`
	// StartupPassed and Ready are the probe verdicts for this instance.
	StartupPassed bool  `json:"startupPassed,omitempty"`
	Ready         bool  `json:"ready,omitempty"`
	Stop          *Stop `json:"stop,omitempty"`
	// WaitReason and WaitMessage say why a container that could not be
	// created waits (ErrImagePull, CreateContainerError, …); FailStep
	// counts such failures in a row for their own backoff. None of them
	// ran a process, so none counts as a restart.
	WaitReason  string    `json:"waitReason,omitempty"`
	WaitMessage string    `json:"waitMessage,omitempty"`
	WaitSince   time.Time `json:"waitSince,omitzero"`
	FailStep    int       `json:"failStep,omitempty"`
	// retryAsked are the reasons RetryWaiting named while the container
	// was Starting (not kept: a daemon restarted rebuilds its starts);
	// startAsked is when that start was asked for.
	retryAsked []string
	startAsked time.Time
}

// PendingKill is a probe failure not acted on yet.
type PendingKill struct {
	Probe ProbeKind `json:"probe"`
}

// busy reports whether the kubelet's pod worker would be blocked in a
// sync: a container is being killed outside a termination (a failed
// probe or postStart hook; the kill runs its preStop hook and waits for
// the exit) or a postStart hook runs.
func (in *Instance) busy() bool {
	for _, c := range in.AllContainers() {
		if (c.Stop != nil && c.live()) || c.PostStartActive {
			return true
		}
	}
	return false
}

// Failure is why a pod instance failed as a whole.
type Failure struct {
	Reason  string `json:"reason"`
	Message string `json:"message"`
	// DisruptionTarget: the device stopped the pod on its own (a
	// self-fencing lease ran out); the pod carries the DisruptionTarget
	// condition, reason TerminationByKubelet, with Message.
	DisruptionTarget bool `json:"disruptionTarget,omitempty"`
}

// Instance is one incarnation of a pod: a UID. A changed manifest is a new
// instance; the old one must be fully terminated before the new one starts.
type Instance struct {
	Pod        *v1.Pod      `json:"pod"`
	Created    time.Time    `json:"created"`
	StartTime  time.Time    `json:"startTime,omitzero"`
	Init       []*Container `json:"init,omitempty"` // init containers and sidecars, in order
	Containers []*Container `json:"containers"`
	// Initialized is set once every init container completed and every
	// sidecar started.
	Initialized   bool      `json:"initialized,omitempty"`
	InitializedAt time.Time `json:"initializedAt,omitzero"`
	// Failed is set when the pod as a whole failed (deadline exceeded, an
	// init container failed under restartPolicy Never): nothing restarts.
	Failed *Failure `json:"failed,omitempty"`
	// Terminating is set when the instance is no longer desired or was
	// deleted; GraceDeadline is when everything must be gone.
	Terminating      bool      `json:"terminating,omitempty"`
	TerminationStart time.Time `json:"terminationStart,omitzero"`
	GraceDeadline    time.Time `json:"graceDeadline,omitzero"`
	// Force kills every container at once (a forced delete).
	Force bool `json:"force,omitempty"`
	// Conditions holds the readiness-gate conditions set through the API.
	Conditions map[v1.PodConditionType]bool `json:"conditions,omitempty"`
	// Transitions holds when each pod condition last changed status.
	Transitions map[v1.PodConditionType]Transition `json:"transitions,omitempty"`
	// Rebuilt: made by Rebuild from the runtime's instances after the
	// record was lost; it has no spec until a desired pod claims it.
	Rebuilt bool `json:"rebuilt,omitempty"`
	// CountsAtCreation marks a record whose restart counts are given at
	// each creation; older records counted at the exit (see Restore).
	CountsAtCreation bool `json:"countsAtCreation,omitempty"`

	revision uint64 // bumped on every change; not persisted
	// noted and notedRevision say which revision's conditions Transitions
	// reflects.
	noted         bool
	notedRevision uint64
}

// UID returns the instance's pod UID.
func (in *Instance) UID() types.UID { return in.Pod.UID }

// Key returns namespace/name, the identity that must never have two live
// instances.
func (in *Instance) Key() string { return KeyOf(in.Pod) }

// KeyOf returns namespace/name of a pod.
func KeyOf(p *v1.Pod) string { return p.Namespace + "/" + p.Name }

// Container returns the named container record (init or regular), or nil.
func (in *Instance) Container(name string) *Container {
	for _, c := range in.AllContainers() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Spec returns the named container's spec (init or regular), or nil.
func (in *Instance) Spec(name string) *v1.Container {
	for i := range in.Pod.Spec.InitContainers {
		if in.Pod.Spec.InitContainers[i].Name == name {
			return &in.Pod.Spec.InitContainers[i]
		}
	}
	for i := range in.Pod.Spec.Containers {
		if in.Pod.Spec.Containers[i].Name == name {
			return &in.Pod.Spec.Containers[i]
		}
	}
	return nil
}

// AllContainers returns init containers then regular ones.
func (in *Instance) AllContainers() []*Container {
	return append(append([]*Container{}, in.Init...), in.Containers...)
}

// Live reports whether any container has a process or a start in flight.
func (in *Instance) Live() bool {
	for _, c := range in.AllContainers() {
		if c.live() {
			return true
		}
	}
	return false
}

// created counts a newly created instance: it is a restart when an
// instance ran before it (whose end is then lastState).
func (c *Container) created() {
	if c.Last != nil {
		c.RestartCount++
	}
}

// countAtCreation converts the restart counts of a record written before
// they were given at creation: a container waiting to restart had already
// counted the restart to come.
func (in *Instance) countAtCreation() {
	if in.CountsAtCreation {
		return
	}
	for _, c := range in.AllContainers() {
		if (c.Phase == Waiting || c.Phase == Starting) && c.Last != nil && c.RestartCount > 0 {
			c.RestartCount--
		}
	}
	in.CountsAtCreation = true
}

func (c *Container) live() bool { return c.Phase == Running || c.Phase == Starting }

// started is the Kubernetes "started": running, postStart done, startup
// probe passed.
func (c *Container) started() bool {
	return c.Phase == Running && !c.PostStartActive && c.StartupPassed
}

// HookKind names a lifecycle hook.
type HookKind string

// Hooks.
const (
	PostStart HookKind = "PostStart"
	PreStop   HookKind = "PreStop"
)

// ActionKind says what the daemon must do.
type ActionKind string

const (
	// Start a container instance (InstanceID and Attempt are set).
	Start ActionKind = "Start"
	// Signal sends Signal to the container's main process.
	Signal ActionKind = "Signal"
	// Kill sends SIGKILL to the container's whole process tree.
	Kill ActionKind = "Kill"
	// RunHook runs Hook for the container instance within Timeout (zero:
	// none, until the instance ends) and reports back through HookDone.
	RunHook ActionKind = "RunHook"
	// Probe starts the container instance's probes; Unprobe stops those
	// named in Probes (all of them when Probes is empty).
	Probe   ActionKind = "Probe"
	Unprobe ActionKind = "Unprobe"
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
	Signal     string        // Kind == Signal: the signal's name, e.g. SIGTERM
	Hook       HookKind      // Kind == RunHook
	Timeout    time.Duration // Kind == RunHook
	// Probes are the probes an Unprobe stops; empty: every probe.
	Probes []ProbeKind
	// AfterSave: the action must not leave the process before the
	// records in its Ready's MustSave are durable (a Start: see Ready).
	AfterSave bool
	// Event fields (Kind == Record).
	EventType string // Normal or Warning
	Reason    string
	Message   string
	// Resource, of a Preempted event: the resource the preemption frees.
	Resource string
}
