package lifecycle

import (
	"sort"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Found is a container instance the runtime holds for a pod the core has
// no record of: the state database was lost, but the instance directories
// (and their locks) say what ran and what still runs.
type Found struct {
	Container  string
	InstanceID string
	Attempt    int
	Alive      bool
	StartedAt  time.Time
	Exit       *Termination // how an instance that is gone ended
}

// Rebuild records a pod instance from what the runtime found of it, when
// its record was lost. The instance is a placeholder until a desired pod
// with its UID claims it (Ready): then it takes that pod's spec, and
// its running containers are adopted, not started again. Unclaimed, it is
// stopped as any undesired instance, unless KeepRebuilt holds it.
//
// The history is what the instance directories tell: the highest attempt
// is the current instance, restartCount is its attempt less one (every
// process start after the first is a restart), lastState is the previous
// attempt's end when its directory is still there, and the pod's
// startTime is the earliest start found. runtimeClass names the runtime
// that holds the instances ("" for the default).
func (m *Machine) Rebuild(uid types.UID, namespace, name, runtimeClass string, found []Found, now time.Time) {
	if m.instances[uid] != nil || len(found) == 0 {
		return
	}
	byName := map[string][]Found{}
	for _, f := range found {
		byName[f.Container] = append(byName[f.Container], f)
	}
	in := &Instance{
		Pod:     &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, UID: uid}},
		Created: now, StartTime: now, Initialized: true, Rebuilt: true, CountsAtCreation: true,
	}
	if runtimeClass != "" {
		// Until claimed, the placeholder must say which runtime holds
		// its containers.
		in.Pod.Spec.RuntimeClassName = &runtimeClass
	}
	names := make([]string, 0, len(byName))
	for n := range byName {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fs := byName[n]
		sort.Slice(fs, func(i, j int) bool { return fs[i].Attempt < fs[j].Attempt })
		for _, f := range fs {
			if !f.StartedAt.IsZero() && f.StartedAt.Before(in.StartTime) {
				in.StartTime = f.StartedAt
			}
		}
		in.Pod.Spec.Containers = append(in.Pod.Spec.Containers, v1.Container{Name: n})
		in.Containers = append(in.Containers, rebuildContainer(n, fs))
	}
	in.Created = in.StartTime
	m.clampInstance(in, now)
	m.instances[uid] = in
	m.touch(uid)
}

// rebuildContainer makes a container record from its instances, oldest
// first. The current instance is the newest one alive, or else the newest;
// attempt numbers go on after the highest seen.
func rebuildContainer(name string, fs []Found) *Container {
	cur := len(fs) - 1
	for i := len(fs) - 1; i >= 0; i-- {
		if fs[i].Alive {
			cur = i
			break
		}
	}
	top := fs[cur]
	c := &Container{Name: name, Kind: RegularKind, Attempt: fs[len(fs)-1].Attempt, RestartCount: int32(max(top.Attempt-1, 0)),
		InstanceID: top.InstanceID, StartedAt: top.StartedAt}
	if cur > 0 && fs[cur-1].Attempt == top.Attempt-1 && fs[cur-1].Exit != nil {
		c.Last = fs[cur-1].Exit
	}
	if top.Alive {
		c.Phase, c.StartupPassed, c.Ready = Running, true, true
		return c
	}
	c.Phase = Exited
	if c.Current = top.Exit; c.Current == nil {
		c.Current = &Termination{InstanceID: top.InstanceID, ExitCode: 137, Reason: "ContainerStatusUnknown",
			StartedAt: top.StartedAt, FinishedAt: top.StartedAt}
	}
	return c
}

// KeepRebuilt holds rebuilt instances that no desired pod claims until
// the given time, for desired pods that arrive later (a hub whose
// document was lost with the database resends it).
func (m *Machine) KeepRebuilt(until time.Time) { m.keepRebuilt = until }

// claim gives a rebuilt instance the spec of the desired pod with its UID
// and adopts its running containers: probes start afresh, as after any
// daemon restart.
func (m *Machine) claim(in *Instance, want *v1.Pod) []Action {
	fresh := newInstance(want, in.Created)
	fresh.StartTime = in.StartTime
	found := map[string]*Container{}
	for _, c := range in.AllContainers() {
		found[c.Name] = c
	}
	appsRan := false
	for _, c := range fresh.Containers {
		appsRan = appsRan || found[c.Name] != nil
	}
	var acts []Action
	adopt := func(list []*Container) {
		for i, c := range list {
			f := found[c.Name]
			if f == nil {
				if c.Kind == InitKind && appsRan {
					// The app containers ran, so this one completed; its
					// directory is gone.
					c.Phase, c.Current = Exited, &Termination{Reason: "Completed", StartedAt: in.StartTime, FinishedAt: in.StartTime}
				}
				continue
			}
			f.Kind = c.Kind
			if f.Phase == Running {
				spec := fresh.Spec(f.Name)
				f.StartupPassed, f.Ready = spec.StartupProbe == nil, spec.ReadinessProbe == nil
				if hasProbes(spec) {
					acts = append(acts, Action{Kind: Probe, Pod: in.UID(), Container: f.Name, InstanceID: f.InstanceID})
				}
			}
			list[i] = f
		}
	}
	adopt(fresh.Init)
	adopt(fresh.Containers)
	fresh.Initialized = len(fresh.Init) == 0 || appsRan
	if fresh.Initialized {
		fresh.InitializedAt = in.StartTime
	}
	rev := in.revision
	*in = *fresh
	in.revision = rev
	m.touch(in.UID())
	return append(acts, record(in, "Warning", "Rebuilt", "pod record rebuilt from what the runtime holds after the state database was lost"))
}
