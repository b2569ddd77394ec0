package lifecycle

import (
	"fmt"
	"slices"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Machine holds every pod instance the device knows and decides what to do
// with them. It is not safe for concurrent use: one goroutine owns it.
type Machine struct {
	cfg       Config
	desired   map[string]*v1.Pod      // by namespace/name
	instances map[types.UID]*Instance // live or terminating instances
	dirty     map[types.UID]bool      // records changed since they were saved
	forgotten map[types.UID]bool      // records to delete
	// saveFirst are the instances whose records must be durable before
	// this step's actions leave the process (Ready.MustSave); viewed the
	// instances whose status changed since the last Ready.
	saveFirst map[types.UID]bool
	viewed    map[types.UID]bool
	// unsavedSince is when a Ready first saw the unsaved changes: they
	// are saved Config.SaveDelay later at the latest.
	unsavedSince time.Time
	// attempts remembers the last attempt of each container of a
	// forgotten instance, so a pod recreated with the same UID (deleted,
	// same content) never reuses a container ID.
	attempts map[types.UID]map[string]int
	// admit decides whether a new instance may start (nil: always);
	// pending holds why desired pods are not admitted, by key.
	admit    AdmitFunc
	pending  map[string]Admission
	nextWake time.Time
	// keepRebuilt: rebuilt instances no desired pod claims are kept
	// until then (KeepRebuilt).
	keepRebuilt time.Time
}

func NewMachine(cfg Config) *Machine {
	return &Machine{
		cfg:       cfg,
		desired:   map[string]*v1.Pod{},
		instances: map[types.UID]*Instance{},
		dirty:     map[types.UID]bool{},
		forgotten: map[types.UID]bool{},
		saveFirst: map[types.UID]bool{},
		viewed:    map[types.UID]bool{},
		attempts:  map[types.UID]map[string]int{},
		pending:   map[string]Admission{},
	}
}

// Restore puts back an instance recorded before a daemon restart, before the
// first Ready. Times after now (the clock stepped back) become now. A
// termination in progress starts over with the full grace
// period, as the kubelet does, and its stop signals are sent again; a
// forced stop sends its SIGKILL again.
func (m *Machine) Restore(in *Instance, now time.Time) {
	m.instances[in.UID()] = in
	in.countAtCreation()
	if m.clampInstance(in, now) {
		m.touch(in.UID())
	}
	if !in.Terminating {
		return
	}
	in.GraceDeadline = now.Add(m.gracePeriod(in.Pod))
	for _, c := range in.AllContainers() {
		switch {
		case c.Stop != nil && !c.Stop.Force:
			c.Stop = &Stop{Reason: c.Stop.Reason, Deadline: in.GraceDeadline, PreStopRan: c.Stop.PreStopRan || c.Stop.PreStopActive}
		case c.Stop != nil:
			// The SIGKILL of the daemon before may never have reached
			// the container: send it again.
			c.Stop.KillSent = false
		}
	}
	m.touch(in.UID())
}

// RestoreOrphan records a live container instance whose pod instance has
// no record. It is killed at once, and until it is gone no instance of its
// pod (namespace/name) starts.
func (m *Machine) RestoreOrphan(uid types.UID, namespace, name, container, instanceID string, attempt int, now time.Time) {
	in := m.instances[uid]
	if in == nil {
		in = &Instance{
			Pod:     &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: uid}},
			Created: now, StartTime: now, Initialized: true,
			Terminating: true, TerminationStart: now, GraceDeadline: now, Force: true, CountsAtCreation: true,
		}
		m.instances[uid] = in
	}
	in.Pod.Spec.Containers = append(in.Pod.Spec.Containers, v1.Container{Name: container})
	in.Containers = append(in.Containers, &Container{Name: container, Kind: RegularKind, Phase: Running,
		InstanceID: instanceID, Attempt: attempt, StartedAt: now, StartupPassed: true})
	m.touch(uid)
}

// SandboxLost tells the machine every process of an instance is gone
// because the device restarted: the pod restarts, init containers included,
// and one a node shutdown stopped runs again.
func (m *Machine) SandboxLost(uid types.UID) {
	in := m.instances[uid]
	if in == nil || in.Terminating || m.Revive(uid) {
		return
	}
	m.rerunInit(in)
}

// rerunInit makes the init containers of an instance run again from the
// first, as in a new sandbox.
func (m *Machine) rerunInit(in *Instance) {
	in.Initialized = false
	for _, c := range in.Init {
		if c.Phase == Exited && c.Kind == InitKind && c.Current != nil && c.Current.ExitCode == 0 {
			c.Last, c.Current, c.Phase = c.Current, nil, Waiting
		}
	}
	m.touch(in.UID())
}

// SetDesired replaces the desired pod set. Pods must be defaulted and carry
// their content-derived UID.
func (m *Machine) SetDesired(pods []*v1.Pod) {
	m.desired = make(map[string]*v1.Pod, len(pods))
	for _, p := range pods {
		m.desired[KeyOf(p)] = p
	}
}

// Instances returns all instances ordered by key, then creation.
func (m *Machine) Instances() []*Instance {
	out := make([]*Instance, 0, len(m.instances))
	for _, in := range m.instances {
		out = append(out, in)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Key() != out[j].Key() {
			return out[i].Key() < out[j].Key()
		}
		return out[i].Created.Before(out[j].Created)
	})
	return out
}

// Instance returns the instance with the UID, or nil.
func (m *Machine) Instance(uid types.UID) *Instance { return m.instances[uid] }

// touch marks an instance changed: to be saved, and shown anew.
func (m *Machine) touch(uid types.UID) {
	m.dirty[uid] = true
	m.viewed[uid] = true
	if in := m.instances[uid]; in != nil {
		in.revision++
	}
}

// forget drops an instance whose processes are all gone: its record is
// deleted and its view goes.
func (m *Machine) forget(in *Instance) {
	delete(m.instances, in.UID())
	delete(m.dirty, in.UID())
	m.forgotten[in.UID()] = true
	m.viewed[in.UID()] = true
}

func (m *Machine) lookup(uid types.UID, name, instanceID string) (*Instance, *Container) {
	in := m.instances[uid]
	if in == nil {
		return nil, nil
	}
	c := in.Container(name)
	if c == nil || c.InstanceID != instanceID {
		return in, nil
	}
	return in, c
}

// Started records that a container instance is running. Its probes start,
// and its postStart hook runs if it has one.
func (m *Machine) Started(uid types.UID, name, instanceID string, at time.Time) []Action {
	in, c := m.lookup(uid, name, instanceID)
	if c == nil || c.Phase != Starting {
		return nil
	}
	c.Phase = Running
	c.StartedAt = at
	c.created()
	c.WaitReason, c.WaitMessage, c.WaitSince, c.FailStep = "", "", time.Time{}, 0
	spec := in.Spec(name)
	c.StartupPassed = spec.StartupProbe == nil
	c.Ready = spec.ReadinessProbe == nil
	m.touch(uid)
	acts := []Action{record(in, "Normal", "Started", "Started container "+name)}
	if hasProbes(spec) {
		acts = append(acts, Action{Kind: Probe, Pod: uid, Container: name, InstanceID: instanceID})
	}
	if hasPostStart(spec) {
		c.PostStartActive = true
		// The kubelet sets no timeout on an exec or sleep hook (it ends
		// with its container): the container waits as long as its
		// postStart runs. An httpGet hook is bounded by the grace period.
		timeout := m.gracePeriod(in.Pod)
		if h := spec.Lifecycle.PostStart; h.Exec != nil || h.Sleep != nil {
			timeout = 0
		}
		acts = append(acts, Action{Kind: RunHook, Pod: uid, Container: name, InstanceID: instanceID,
			Hook: PostStart, Timeout: timeout})
	}
	return acts
}

func hasProbes(c *v1.Container) bool {
	return c.StartupProbe != nil || c.LivenessProbe != nil || c.ReadinessProbe != nil
}

// StartFailed records that a container instance could not be created: its
// image could not be pulled, or its configuration not applied. No process
// ran, so it is not a restart: the container waits with the reason and is
// tried again after a backoff of its own, as the kubelet retries pulls.
func (m *Machine) StartFailed(uid types.UID, name, instanceID, reason, message string, now time.Time) []Action {
	in, c := m.lookup(uid, name, instanceID)
	if c == nil || c.Phase != Starting {
		return nil
	}
	// What changed while the start ran (RetryWaiting) may have ended the
	// cause: the container is tried again at once, not after a backoff.
	retryNow := slices.Contains(c.retryAsked, reason)
	c.retryAsked = nil
	if reason == ObjectsPending {
		return m.objectsPending(in, c, message, now, retryNow)
	}
	c.FailStep++
	if reason == FailedMount {
		acts := m.mountFailed(in, c, message, now)
		if retryNow {
			c.NotBefore = now
		}
		return acts
	}
	delay := m.backoffDelay(c.FailStep)
	c.Phase, c.WaitReason, c.WaitMessage, c.WaitSince = Waiting, reason, message, now
	c.NotBefore = now.Add(delay)
	if retryNow {
		c.NotBefore = now
	}
	m.wakeAt(c.NotBefore)
	m.touch(uid)
	// The kubelet's events: a failed pull says why, then "Error: <reason>";
	// any other failure to create or start says "Error: <message>".
	var acts []Action
	switch reason {
	case ErrImagePull, ErrImageNeverPull:
		why := "Failed"
		if reason == ErrImageNeverPull {
			why = ErrImageNeverPull
		}
		acts = append(acts, record(in, "Warning", why, message), record(in, "Warning", "Failed", "Error: "+reason))
	case CreateContainerConfigError:
		// The kubelet says only this, and tries again at its next sync.
		return append(acts, record(in, "Warning", "Failed", "Error: "+message))
	default:
		acts = append(acts, record(in, "Warning", "Failed", "Error: "+message))
	}
	return append(acts, record(in, "Normal", "BackOff", fmt.Sprintf("Back-off %s before trying container %s again", delay, name)))
}

// mountFailed is a start that waits for its volumes, as the kubelet's
// volume manager makes a pod wait: the container stays in its default
// waiting state (ContainerCreating), the pod gets a FailedMount warning
// with the volume's error, and the mount is tried again after the
// kubelet's volume backoff (500 ms doubling up to 2m2s), or as soon as
// RetryWaiting says the objects changed.
func (m *Machine) mountFailed(in *Instance, c *Container, message string, now time.Time) []Action {
	c.Phase, c.WaitReason, c.WaitMessage, c.WaitSince = Waiting, FailedMount, message, now
	c.NotBefore = now.Add(mountBackoff(c.FailStep))
	m.wakeAt(c.NotBefore)
	m.touch(in.UID())
	return []Action{record(in, "Warning", FailedMount, message)}
}

// The kubelet's backoff of a failing volume operation
// (exponentialbackoff: 500 ms, doubling, at most 2m2s).
const (
	mountBackoffInitial = 500 * time.Millisecond
	mountBackoffMax     = 2*time.Minute + 2*time.Second
)

// mountBackoff is the wait after failure number step (from 1).
func mountBackoff(step int) time.Duration {
	d := mountBackoffInitial
	for i := 1; i < step && d < mountBackoffMax; i++ {
		d *= 2
	}
	return min(d, mountBackoffMax)
}

// retryDuringStart are the waits a change during a start retries at once:
// the objects a start reads. An image's arrival does not: the runtime may
// have held the start until its import ended (it pulled after the image
// was there), and a pull failing twice in a row doubles its backoff.
var retryDuringStart = []string{FailedMount, CreateContainerConfigError, ObjectsPending}

// RetryWaiting ends the backoff of containers that failed before since
// for one of the reasons: an image that arrived since need not wait out a
// pull backoff.
func (m *Machine) RetryWaiting(since, now time.Time, reasons ...string) {
	for _, in := range m.instances {
		for _, c := range in.AllContainers() {
			if c.Phase == Starting {
				// A start asked for before the change may have read what
				// was there before: if it fails for one of the reasons, it
				// is tried again at once. One asked for after it saw it.
				if !c.startAsked.After(since) {
					for _, r := range reasons {
						if slices.Contains(retryDuringStart, r) {
							c.retryAsked = append(c.retryAsked, r)
						}
					}
				}
				continue
			}
			if c.Phase != Waiting || c.WaitReason == "" || !now.Before(c.NotBefore) || !c.WaitSince.Before(since) {
				continue
			}
			for _, r := range reasons {
				if c.WaitReason == r {
					c.NotBefore = now
					m.touch(in.UID())
				}
			}
		}
	}
}

// Exited records that a container instance terminated. A start that failed
// is reported as an exit with reason StartError and exit code 128.
func (m *Machine) Exited(uid types.UID, name string, t Termination) []Action {
	in, c := m.lookup(uid, name, t.InstanceID)
	if c == nil || !c.live() {
		return nil
	}
	if t.StartedAt.IsZero() {
		t.StartedAt = c.StartedAt
	}
	if t.StartedAt.IsZero() {
		t.StartedAt = t.FinishedAt
	}
	if t.Reason == "" {
		t.Reason = "Completed"
		if t.ExitCode != 0 {
			t.Reason = "Error"
		}
	}
	term := t
	if c.Phase == Starting { // created, but it never ran: a StartError
		c.created()
	}
	c.Phase = Exited
	c.Current = &term
	c.Stop, c.PostStartActive, c.Ready, c.StartupPassed, c.PendingKill = nil, false, false, false, nil
	m.touch(uid)
	acts := []Action{{Kind: Unprobe, Pod: uid, Container: name, InstanceID: t.InstanceID}}
	// A container that ran cleanly long enough starts its backoff afresh.
	if t.FinishedAt.Sub(t.StartedAt) >= m.cfg.BackoffReset {
		c.BackoffStep = 0
	}
	if t.Reason == "StartError" {
		acts = append(acts, record(in, "Warning", "Failed", "Error: "+t.Message))
	}
	return acts
}

// HookDone records the end of a hook. A failed postStart kills the
// container; a preStop, failed or not, lets the stop signal go out.
func (m *Machine) HookDone(uid types.UID, name, instanceID string, hook HookKind, err error, now time.Time) []Action {
	in, c := m.lookup(uid, name, instanceID)
	if c == nil || c.Phase != Running {
		return nil
	}
	m.touch(uid)
	switch hook {
	case PostStart:
		if !c.PostStartActive {
			return nil
		}
		c.PostStartActive = false
		if err != nil {
			// The kubelet's events: no hook output, which may hold
			// secrets (the daemon logs it).
			acts := []Action{record(in, "Warning", "FailedPostStartHook", "PostStartHook failed")}
			return append(acts, m.stopContainer(in, c, m.gracePeriod(in.Pod), "FailedPostStartHook", "FailedPostStartHook", now)...)
		}
	case PreStop:
		if c.Stop == nil || !c.Stop.PreStopActive {
			return nil
		}
		c.Stop.PreStopActive = false
		if err != nil {
			return []Action{record(in, "Warning", "FailedPreStopHook", "PreStopHook failed")}
		}
	}
	return nil
}

// Delete terminates an instance on request. grace, if set, overrides the
// pod's termination grace period but can only shorten a termination in
// progress; force kills at once.
func (m *Machine) Delete(uid types.UID, grace *time.Duration, force bool, now time.Time) error {
	in := m.instances[uid]
	if in == nil {
		return fmt.Errorf("no pod instance %s", uid)
	}
	g := m.gracePeriod(in.Pod)
	if grace != nil {
		g = *grace
	}
	deadline := now.Add(g)
	if !in.Terminating {
		in.Terminating = true
		in.TerminationStart = now
		in.GraceDeadline = deadline
	} else if deadline.Before(in.GraceDeadline) {
		in.GraceDeadline = deadline
	}
	for _, c := range in.AllContainers() {
		if c.Stop != nil {
			m.shorten(c, in.GraceDeadline, now)
			c.Stop.Force = c.Stop.Force || force
		}
	}
	if force {
		in.GraceDeadline, in.Force = now, true
	}
	m.touch(uid)
	return nil
}

// SetCondition sets a readiness-gate condition of a pod instance.
func (m *Machine) SetCondition(uid types.UID, typ v1.PodConditionType, status bool) error {
	in := m.instances[uid]
	if in == nil {
		return fmt.Errorf("no pod instance %s", uid)
	}
	if in.Conditions == nil {
		in.Conditions = map[v1.PodConditionType]bool{}
	}
	in.Conditions[typ] = status
	m.touch(uid)
	return nil
}

// Adopted marks a container as running an instance found alive after a
// daemon restart. Probes restart from their initial state.
func (m *Machine) Adopted(uid types.UID, name, instanceID string, attempt int, startedAt time.Time) []Action {
	in := m.instances[uid]
	if in == nil {
		return nil
	}
	c := in.Container(name)
	if c == nil {
		return nil
	}
	switch {
	case c.Phase == Exited && c.Current != nil:
		// It was restarted before the crash, but the record was not saved.
		c.Last, c.Current = c.Current, nil
		c.created()
	case c.Phase != Running:
		// Its start was recorded, its creation not.
		c.created()
	}
	spec := in.Spec(name)
	c.Phase = Running
	c.InstanceID = instanceID
	c.StartedAt = startedAt
	c.PostStartActive, c.PendingKill = false, nil
	// A restarted kubelet sets Started and Ready false until probes say
	// otherwise; containers without probes need no wait.
	c.StartupPassed = spec.StartupProbe == nil
	c.Ready = spec.ReadinessProbe == nil
	if attempt > c.Attempt {
		c.Attempt = attempt
	}
	if in.StartTime.IsZero() {
		in.StartTime = startedAt
	}
	m.touch(uid)
	if !hasProbes(spec) {
		return nil
	}
	acts := []Action{{Kind: Probe, Pod: uid, Container: name, InstanceID: instanceID}}
	if c.Stop != nil { // stopping: readiness only, as at the stop's start
		acts = append(acts, Action{Kind: Unprobe, Pod: uid, Container: name, InstanceID: instanceID, Probes: []ProbeKind{Liveness, Startup}})
	}
	return acts
}

// SawAttempt tells the machine an instance directory with this attempt
// exists, so attempt numbers (and instance IDs) never repeat.
func (m *Machine) SawAttempt(uid types.UID, name string, attempt int) {
	if in := m.instances[uid]; in != nil {
		if c := in.Container(name); c != nil && attempt > c.Attempt {
			c.Attempt = attempt
		}
	}
}

// reconcile compares desired and known instances at now and returns what to
// do. It is idempotent: calling it again without new observations returns
// no further start or stop actions.
func (m *Machine) reconcile(now time.Time) []Action {
	var acts []Action
	m.nextWake = time.Time{}

	byKey := map[string][]*Instance{}
	for _, in := range m.instances {
		byKey[in.Key()] = append(byKey[in.Key()], in)
		if m.clampInstance(in, now) { // the wall clock stepped back
			m.touch(in.UID())
		}
	}
	keys := make([]string, 0, len(byKey)+len(m.desired))
	for k := range byKey {
		keys = append(keys, k)
	}
	for k := range m.desired {
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)

	var create []*v1.Pod
	for _, key := range keys {
		want := m.desired[key]
		var current *Instance
		blocked := false
		for _, in := range byKey[key] {
			if want != nil && in.UID() == want.UID && !in.Terminating {
				if in.Rebuilt {
					acts = append(acts, m.claim(in, want)...)
				}
				current = in
				continue
			}
			if in.Rebuilt && !in.Terminating && want == nil && now.Before(m.keepRebuilt) {
				m.wakeAt(m.keepRebuilt) // its desired pod may yet come
				continue
			}
			if !in.Terminating {
				in.Terminating = true
				in.TerminationStart = now
				in.GraceDeadline = now.Add(m.gracePeriod(in.Pod))
				m.touch(in.UID())
			}
			acts = append(acts, m.terminate(in, now)...)
			if in.Live() {
				blocked = true
				continue
			}
			m.forget(in)
			if want != nil && want.UID == in.UID() {
				last := map[string]int{}
				for _, c := range in.AllContainers() {
					last[c.Name] = c.Attempt
				}
				m.attempts[in.UID()] = last
			}
			acts = append(acts, Action{Kind: Forget, Pod: in.UID()})
		}
		if want == nil {
			delete(m.pending, key)
			continue
		}
		if current == nil {
			// At most once: a replacement waits until every process of
			// the previous instance is gone.
			if !blocked {
				create = append(create, want)
			}
			continue
		}
		acts = append(acts, m.sync(current, now)...)
	}
	acts = append(acts, m.admitNew(create, now)...)
	m.noteConditions(now)
	return acts
}

// LongestGrace is the longest any pod may take to stop: its grace period
// as a stop gives it, at least the minimum.
func (m *Machine) LongestGrace() time.Duration {
	g := m.cfg.MinGracePeriod
	for _, in := range m.instances {
		g = max(g, m.gracePeriod(in.Pod))
	}
	return g
}

func (m *Machine) gracePeriod(p *v1.Pod) time.Duration {
	if s := p.Spec.TerminationGracePeriodSeconds; s != nil {
		return time.Duration(*s) * time.Second
	}
	return 30 * time.Second
}

func (m *Machine) wakeAt(t time.Time) {
	if m.nextWake.IsZero() || t.Before(m.nextWake) {
		m.nextWake = t
	}
}

func record(in *Instance, typ, reason, msg string) Action {
	return Action{Kind: Record, Pod: in.UID(), EventType: typ, Reason: reason, Message: msg}
}
