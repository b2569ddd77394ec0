package lifecycle

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Admission is the answer to "may this pod start now?".
type Admission struct {
	Admit   bool
	Reason  string // OutOfcpu, OutOfmemory, OutOfpods, Evicted, Preempting, ...
	Message string
	// Victims are preempted (ended Failed, reason Preempted) to make room;
	// the pod starts once they are gone.
	Victims []types.UID
	// Resource is the first resource the pod lacked, which the victims
	// free (the Preempted events' Action.Resource).
	Resource string
	Since    time.Time
	// Recheck, for a refusal that depends on the host rather than on
	// the other pods (a process pod's mountPath missing), asks for the
	// decision again after it even if nothing else changes.
	Recheck time.Duration
}

// AdmitFunc decides on a candidate pod given the pods holding resources.
type AdmitFunc func(candidate *v1.Pod, admitted []*v1.Pod) Admission

// SetAdmitter installs the admission decision (nil admits every pod).
func (m *Machine) SetAdmitter(f AdmitFunc) { m.admit = f }

// NewMachine returns an empty machine.
// admitNew starts instances for desired pods that have none, highest
// priority first, each only if admission lets it.
func (m *Machine) admitNew(create []*v1.Pod, now time.Time) []Action {
	sort.SliceStable(create, func(i, j int) bool { return PriorityOf(create[i]) > PriorityOf(create[j]) })
	var acts []Action
	for _, want := range create {
		key := KeyOf(want)
		if m.admit != nil {
			d := m.admit(want, m.holding())
			if !d.Admit || len(d.Victims) > 0 {
				if prev, ok := m.pending[key]; ok && prev.Reason == d.Reason {
					d.Since = prev.Since
				} else {
					d.Since = now
				}
				if len(d.Victims) > 0 {
					d.Reason = "Preempting"
					for _, uid := range d.Victims {
						acts = append(acts, m.preempt(uid, key, d.Resource, now)...)
					}
				}
				m.pending[key] = d
				if !d.Admit && d.Recheck > 0 {
					m.wakeAt(now.Add(d.Recheck))
				}
				continue
			}
		}
		delete(m.pending, key)
		in := newInstance(want, now)
		for _, c := range in.AllContainers() {
			c.Attempt = m.attempts[want.UID][c.Name]
		}
		delete(m.attempts, want.UID)
		m.instances[in.UID()] = in
		m.touch(in.UID())
		acts = append(acts, m.sync(in, now)...)
	}
	return acts
}

// holding lists the pods whose instances hold resources: every instance
// with a live process or that will run again.
func (m *Machine) holding() []*v1.Pod {
	var out []*v1.Pod
	for _, in := range m.Instances() {
		if in.Live() || (in.Failed == nil && !in.Terminating && !m.terminal(in)) {
			out = append(out, in.Pod)
		}
	}
	return out
}

// Evict ends an instance Failed with reason Evicted under node pressure,
// giving its containers grace (1s for hard thresholds) before SIGKILL.
func (m *Machine) Evict(uid types.UID, message string, grace time.Duration, now time.Time) []Action {
	return m.Fail(uid, "Evicted", message, grace, now)
}

// Fail ends a running instance Failed with a reason (Evicted, Terminated
// for a node shutdown), stopping its containers within grace. It does not
// restart while its pod stays desired.
func (m *Machine) Fail(uid types.UID, reason, message string, grace time.Duration, now time.Time) []Action {
	in := m.instances[uid]
	if in == nil || in.Failed != nil || in.Terminating {
		return nil
	}
	in.Failed = &Failure{Reason: reason, Message: message}
	in.GraceDeadline = now.Add(grace)
	m.touch(uid)
	acts := []Action{record(in, "Warning", reason, message)}
	return append(acts, m.sync(in, now)...)
}

// ReasonNodeShutdown is the kubelet's reason for a pod a node shutdown
// stopped (a drain stops pods the same way).
const ReasonNodeShutdown = "Terminated"

// Revive runs an instance a node shutdown or drain stopped again, as the
// kubelet runs a static pod again once its node is back: init containers
// run again, then the containers restart as their restart policy says,
// without a backoff to wait out. It reports whether the instance was one.
func (m *Machine) Revive(uid types.UID) bool { return m.ReviveFrom(uid, ReasonNodeShutdown) }

// ReasonLeaseExpired is the status reason of a pod its self-fencing lease
// stopped (podvisor's own: the kubelet has no such stop).
const ReasonLeaseExpired = "LeaseExpired"

// Disrupt is Fail for a stop the device decides on its own: the pod also
// carries the DisruptionTarget condition (reason TerminationByKubelet),
// as a pod the kubelet stops for a node shutdown does.
func (m *Machine) Disrupt(uid types.UID, reason, message string, grace time.Duration, now time.Time) []Action {
	acts := m.Fail(uid, reason, message, grace, now)
	if in := m.instances[uid]; in != nil && in.Failed != nil && in.Failed.Reason == reason {
		in.Failed.DisruptionTarget = true
	}
	return acts
}

// GracePeriod is the grace a stop gives the pod: its
// terminationGracePeriodSeconds, 30 s where it names none.
func (m *Machine) GracePeriod(p *v1.Pod) time.Duration { return m.gracePeriod(p) }

// ReviveFrom is Revive for an instance failed with reason: it runs again
// once nothing of it runs.
func (m *Machine) ReviveFrom(uid types.UID, reason string) bool {
	in := m.instances[uid]
	if in == nil || in.Terminating || in.Failed == nil || in.Failed.Reason != reason || in.Live() {
		return false
	}
	in.Failed = nil
	in.GraceDeadline = time.Time{}
	for _, c := range in.AllContainers() {
		c.BackoffStep, c.NotBefore = 0, time.Time{}
	}
	m.rerunInit(in)
	return true
}

// ReasonPreempted is the status reason and event of a pod preempted to
// admit another.
const ReasonPreempted = "Preempted"

// preempt ends an instance Failed with reason Preempted, gracefully.
func (m *Machine) preempt(uid types.UID, by, resource string, now time.Time) []Action {
	in := m.instances[uid]
	if in == nil || in.Failed != nil {
		return nil
	}
	in.Failed = &Failure{Reason: ReasonPreempted, Message: "Preempted in order to admit pod " + by}
	m.touch(uid)
	ev := record(in, "Warning", ReasonPreempted, in.Failed.Message)
	ev.Resource = resource
	acts := []Action{ev}
	return append(acts, m.sync(in, now)...)
}

// PendingView returns the desired pods that are not admitted, as pods in
// phase Pending whose reason says why.
func (m *Machine) PendingView() []*v1.Pod {
	var out []*v1.Pod
	for key, d := range m.pending {
		want := m.desired[key]
		if want == nil {
			continue
		}
		p := want.DeepCopy()
		p.CreationTimestamp = metav1.NewTime(d.Since)
		p.Status = v1.PodStatus{Phase: v1.PodPending, Reason: d.Reason, Message: d.Message, QOSClass: QOSClass(p)}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return KeyOf(out[i]) < KeyOf(out[j]) })
	return out
}

func newInstance(p *v1.Pod, now time.Time) *Instance {
	// startTime is when the node acknowledged the pod, as in Kubernetes;
	// activeDeadlineSeconds counts from it.
	in := &Instance{Pod: p, Created: now, StartTime: now, CountsAtCreation: true}
	for i := range p.Spec.InitContainers {
		kind := InitKind
		if IsSidecar(&p.Spec.InitContainers[i]) {
			kind = SidecarKind
		}
		in.Init = append(in.Init, &Container{Name: p.Spec.InitContainers[i].Name, Kind: kind, Phase: Waiting})
	}
	for _, c := range p.Spec.Containers {
		in.Containers = append(in.Containers, &Container{Name: c.Name, Kind: RegularKind, Phase: Waiting})
	}
	in.Initialized = len(in.Init) == 0
	return in
}
