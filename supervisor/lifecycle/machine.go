package lifecycle

import (
	"fmt"
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Machine holds every pod instance the device knows and decides what to do
// with them. It is not safe for concurrent use: one goroutine owns it.
type Machine struct {
	cfg       Config
	desired   map[string]*v1.Pod      // by namespace/name
	instances map[types.UID]*Instance // live or terminating instances
	dirty     map[types.UID]bool      // changed since TakeDirty
	forgotten map[types.UID]bool      // removed since TakeDirty
	nextWake  time.Time
}

// NewMachine returns an empty machine.
func NewMachine(cfg Config) *Machine {
	return &Machine{
		cfg:       cfg,
		desired:   map[string]*v1.Pod{},
		instances: map[types.UID]*Instance{},
		dirty:     map[types.UID]bool{},
		forgotten: map[types.UID]bool{},
	}
}

// Restore puts back an instance recorded before a daemon restart. Call it
// before the first Reconcile; observations about its containers follow.
func (m *Machine) Restore(in *Instance) {
	m.instances[in.UID()] = in
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

// TakeDirty returns the instances changed and the UIDs forgotten since the
// last call, for persistence.
func (m *Machine) TakeDirty() (changed []*Instance, forgotten []types.UID) {
	for uid := range m.dirty {
		if in := m.instances[uid]; in != nil {
			changed = append(changed, in)
		}
	}
	for uid := range m.forgotten {
		forgotten = append(forgotten, uid)
	}
	m.dirty = map[types.UID]bool{}
	m.forgotten = map[types.UID]bool{}
	return changed, forgotten
}

// touch marks an instance changed: to be saved, and shown anew.
func (m *Machine) touch(uid types.UID) {
	m.dirty[uid] = true
	if in := m.instances[uid]; in != nil {
		in.revision++
	}
}

// Dirty reports whether anything changed since the last TakeDirty.
func (m *Machine) Dirty() bool { return len(m.dirty) > 0 || len(m.forgotten) > 0 }

// NextWake is when Reconcile must run again even without new observations
// (zero: no timer needed).
func (m *Machine) NextWake() time.Time { return m.nextWake }

// Started records that a container instance is running.
func (m *Machine) Started(uid types.UID, name, instanceID string, at time.Time) []Action {
	in, c := m.lookup(uid, name, instanceID)
	if c == nil || c.Phase != Starting {
		return nil
	}
	c.Phase = Running
	c.StartedAt = at
	if in.StartTime.IsZero() {
		in.StartTime = at
	}
	m.touch(uid)
	return []Action{record(in, "Normal", "Started", "Started container "+name)}
}

// Exited records that a container instance terminated. A start that failed
// is reported as an exit with reason StartError and exit code 128.
func (m *Machine) Exited(uid types.UID, name string, t Termination) []Action {
	in, c := m.lookup(uid, name, t.InstanceID)
	if c == nil || (c.Phase != Running && c.Phase != Starting) {
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
	c.Phase = Exited
	c.Current = &term
	c.Stopping, c.KillSent, c.KillAt = false, false, time.Time{}
	m.touch(uid)
	if in.Terminating {
		return nil
	}
	// A container that ran cleanly long enough starts its backoff afresh.
	if t.FinishedAt.Sub(t.StartedAt) >= m.cfg.BackoffReset {
		c.BackoffStep = 0
	}
	if t.Reason == "StartError" {
		return []Action{record(in, "Warning", "Failed", fmt.Sprintf("Error: %s", t.Message))}
	}
	return nil
}

// Adopted marks a container as running an instance found alive after a
// daemon restart (its start was never answered, or was answered before the
// crash and is being restored).
func (m *Machine) Adopted(uid types.UID, name, instanceID string, attempt int, startedAt time.Time) {
	in := m.instances[uid]
	if in == nil {
		return
	}
	c := in.Container(name)
	if c == nil {
		return
	}
	if c.Phase == Exited && c.Current != nil {
		// It was restarted before the crash, but the record was not saved.
		c.Last, c.Current = c.Current, nil
		c.RestartCount++
	}
	c.Phase = Running
	c.InstanceID = instanceID
	c.StartedAt = startedAt
	if attempt > c.Attempt {
		c.Attempt = attempt
	}
	if in.StartTime.IsZero() {
		in.StartTime = startedAt
	}
	m.touch(uid)
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

// Reconcile compares desired and known instances at now and returns what to
// do. It is idempotent: calling it again without new observations returns
// no further start or stop actions.
func (m *Machine) Reconcile(now time.Time) []Action {
	var acts []Action
	m.nextWake = time.Time{}

	byKey := map[string][]*Instance{}
	for _, in := range m.instances {
		byKey[in.Key()] = append(byKey[in.Key()], in)
	}
	keys := map[string]bool{}
	for k := range byKey {
		keys[k] = true
	}
	for k := range m.desired {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)

	for _, key := range sorted {
		want := m.desired[key]
		var current *Instance
		blocked := false
		for _, in := range byKey[key] {
			if want != nil && in.UID() == want.UID && !in.Terminating {
				current = in
				continue
			}
			acts = append(acts, m.terminate(in, now)...)
			if in.live() {
				blocked = true
			} else {
				delete(m.instances, in.UID())
				m.forgotten[in.UID()] = true
				acts = append(acts, Action{Kind: Forget, Pod: in.UID()})
			}
		}
		if want == nil {
			continue
		}
		if current == nil {
			// At most once: a replacement waits until every process of
			// the previous instance is gone.
			if blocked {
				continue
			}
			current = newInstance(want, now)
			m.instances[current.UID()] = current
			m.touch(current.UID())
		}
		acts = append(acts, m.sync(current, now)...)
	}
	return acts
}

func newInstance(p *v1.Pod, now time.Time) *Instance {
	in := &Instance{Pod: p, Created: now}
	for _, c := range p.Spec.Containers {
		in.Containers = append(in.Containers, &Container{Name: c.Name, Phase: Waiting})
	}
	return in
}

// sync drives one desired instance towards running per its restart policy.
func (m *Machine) sync(in *Instance, now time.Time) []Action {
	var acts []Action
	policy := in.Pod.Spec.RestartPolicy
	for _, c := range in.Containers {
		switch c.Phase {
		case Waiting:
			if !c.NotBefore.IsZero() && now.Before(c.NotBefore) {
				m.wakeAt(c.NotBefore)
				continue
			}
			acts = append(acts, m.start(in, c))
		case Exited:
			if !shouldRestart(policy, c.Current.ExitCode) {
				continue
			}
			delay := m.backoffDelay(c.BackoffStep)
			c.BackoffStep++
			c.Last = c.Current
			c.Current = nil
			c.RestartCount++
			c.NotBefore = c.Last.FinishedAt.Add(delay)
			c.Phase = Waiting
			m.touch(in.UID())
			if now.Before(c.NotBefore) {
				acts = append(acts, record(in, "Warning", "BackOff",
					fmt.Sprintf("Back-off %s restarting failed container %s", delay, c.Name)))
				m.wakeAt(c.NotBefore)
				continue
			}
			acts = append(acts, m.start(in, c))
		}
	}
	return acts
}

func (m *Machine) start(in *Instance, c *Container) Action {
	c.Attempt++
	c.Phase = Starting
	c.InstanceID = InstanceID(in.UID(), c.Name, c.Attempt)
	c.NotBefore = time.Time{}
	m.touch(in.UID())
	return Action{Kind: Start, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID, Attempt: c.Attempt}
}

// InstanceID names a container instance: unique per pod UID, container and
// attempt, and safe as a directory name.
func InstanceID(uid types.UID, container string, attempt int) string {
	return fmt.Sprintf("%s_%s_%d", uid, container, attempt)
}

// terminate stops every running container of an undesired instance and
// kills those still running when its grace period runs out.
func (m *Machine) terminate(in *Instance, now time.Time) []Action {
	var acts []Action
	if !in.Terminating {
		in.Terminating = true
		in.TerminationStart = now
		in.GraceDeadline = now.Add(m.gracePeriod(in.Pod))
		m.touch(in.UID())
	}
	for _, c := range in.Containers {
		switch c.Phase {
		case Waiting:
			// Never started or waiting out a backoff: nothing to stop.
			c.NotBefore = time.Time{}
		case Running:
			if !c.Stopping {
				c.Stopping = true
				c.KillAt = in.GraceDeadline
				m.touch(in.UID())
				acts = append(acts,
					record(in, "Normal", "Killing", "Stopping container "+c.Name),
					Action{Kind: Stop, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID})
			}
			if !c.KillSent {
				if !now.Before(c.KillAt) {
					c.KillSent = true
					m.touch(in.UID())
					acts = append(acts, Action{Kind: Kill, Pod: in.UID(), Container: c.Name, InstanceID: c.InstanceID})
				} else {
					m.wakeAt(c.KillAt)
				}
			}
		}
	}
	return acts
}

func (m *Machine) gracePeriod(p *v1.Pod) time.Duration {
	g := m.cfg.MinGracePeriod
	if s := p.Spec.TerminationGracePeriodSeconds; s != nil {
		if d := time.Duration(*s) * time.Second; d > g {
			g = d
		}
	}
	return g
}

// backoffDelay is the wait before restart number step+1: none for the first
// restart, then BackoffInitial doubling up to BackoffMax.
func (m *Machine) backoffDelay(step int) time.Duration {
	if step == 0 {
		return 0
	}
	d := m.cfg.BackoffInitial
	for i := 1; i < step && d < m.cfg.BackoffMax; i++ {
		d *= 2
	}
	if d > m.cfg.BackoffMax {
		d = m.cfg.BackoffMax
	}
	return d
}

func shouldRestart(policy v1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case v1.RestartPolicyNever:
		return false
	case v1.RestartPolicyOnFailure:
		return exitCode != 0
	default:
		return true
	}
}

func (m *Machine) wakeAt(t time.Time) {
	if m.nextWake.IsZero() || t.Before(m.nextWake) {
		m.nextWake = t
	}
}

func record(in *Instance, typ, reason, msg string) Action {
	return Action{Kind: Record, Pod: in.UID(), EventType: typ, Reason: reason, Message: msg}
}
