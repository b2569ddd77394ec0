package lifecycle

import (
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// preStopProbePod is upstream's "a pod is terminating because its
// liveness probe fails" pod: liveness, readiness and a preStop hook.
func preStopProbePod() *v1.Pod {
	p := pod("p", "u", v1.RestartPolicyNever, "app")
	h := v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"probe"}}}
	p.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: h}
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: h}
	p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"hook"}}}}
	return p
}

func unprobes(acts []Action) (out [][]ProbeKind) {
	for _, a := range kinds(acts, Unprobe) {
		out = append(out, a.Probes)
	}
	return out
}

// When a container starts stopping, the kubelet stops its liveness and
// startup probes (StopLivenessAndStartup, and the liveness worker's
// onHold) but keeps probing readiness until it exits: readiness verdicts
// during the preStop hook still count, liveness verdicts do not.
func TestReadinessKeepsProbingWhileStopping(t *testing.T) {
	for _, cause := range []string{"liveness failure", "pod deletion"} {
		t.Run(cause, func(t *testing.T) {
			h := newHarness(t)
			h.m.SetDesired([]*v1.Pod{preStopProbePod()})
			h.reconcile()
			id := h.container("u", "app").InstanceID
			h.m.Probed("u", "app", id, Readiness, true, "", h.now)
			if !h.status("u").ContainerStatuses[0].Ready {
				t.Fatal("not ready after its readiness probe passed")
			}
			h.now = h.now.Add(time.Second)
			var acts []Action
			if cause == "liveness failure" {
				acts = h.m.Probed("u", "app", id, Liveness, false, "exit 1", h.now)
			} else {
				h.m.SetDesired(nil)
				acts = h.reconcile()
			}
			if got := unprobes(acts); len(got) != 1 || !slices.Equal(got[0], []ProbeKind{Liveness, Startup}) {
				t.Fatalf("unprobes at the stop's start = %v, want only [Liveness Startup]", got)
			}
			if hooks := kinds(acts, RunHook); len(hooks) != 1 || hooks[0].Hook != PreStop {
				t.Fatalf("preStop not run: %+v", acts)
			}
			// While the hook runs the container stays ready as long as
			// its readiness probe passes ...
			if cs := h.status("u").ContainerStatuses[0]; !cs.Ready || cs.State.Running == nil {
				t.Fatalf("ready turned false at the stop's start: %+v", cs)
			}
			// ... a liveness verdict changes nothing ...
			if acts := h.m.Probed("u", "app", id, Liveness, false, "exit 1", h.now); len(acts) != 0 {
				t.Fatalf("liveness verdict while stopping acted: %+v", acts)
			}
			// ... and a failing readiness probe makes it unready.
			h.now = h.now.Add(time.Second)
			acts = h.m.Probed("u", "app", id, Readiness, false, "exit 1", h.now)
			if got := events(acts); !slices.Equal(got, []string{"Unhealthy: Readiness probe failed: exit 1"}) {
				t.Fatalf("readiness failure while stopping: events %q", got)
			}
			st := h.status("u")
			if st.ContainerStatuses[0].Ready || podCondition(st, v1.PodReady) {
				t.Fatalf("still ready after readiness failed during preStop: %+v", st)
			}
			// The exit ends every probe.
			acts = h.exit("u", "app", 0)
			if got := unprobes(acts); len(got) != 1 || len(got[0]) != 0 {
				t.Fatalf("unprobes at the exit = %v, want one for every probe", got)
			}
		})
	}
}

// A daemon restart during a stop adopts the container with its readiness
// probe only.
func TestAdoptedStoppingContainerProbesReadinessOnly(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{preStopProbePod()})
	h.reconcile()
	c := h.container("u", "app")
	h.m.Probed("u", "app", c.InstanceID, Liveness, false, "exit 1", h.now)
	acts := h.m.Adopted("u", "app", c.InstanceID, c.Attempt, h.now)
	if len(kinds(acts, Probe)) != 1 {
		t.Fatalf("adopted: no probes %+v", acts)
	}
	if got := unprobes(acts); len(got) != 1 || !slices.Equal(got[0], []ProbeKind{Liveness, Startup}) {
		t.Fatalf("adopted while stopping: unprobes %v, want [Liveness Startup]", got)
	}
}

// The kubelet's PodReadyToStartContainers condition has no reason and no
// message when False (GeneratePodReadyToStartContainersCondition sets
// neither), nor when True.
func TestPodReadyToStartContainersHasNoReason(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyNever, "app")})
	h.reconcile()
	if c := condition(h.status("u"), v1.PodReadyToStartContainers); c.Status != v1.ConditionTrue || c.Reason != "" || c.Message != "" {
		t.Fatalf("running: PodReadyToStartContainers = %+v, want True without reason or message", c)
	}
	h.now = h.now.Add(time.Second)
	h.exit("u", "app", 1)
	if c := condition(h.status("u"), v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse || c.Reason != "" || c.Message != "" {
		t.Fatalf("failed: PodReadyToStartContainers = %+v, want False without reason or message", c)
	}
}

// The kubelet kills a pod's containers concurrently: every preStop hook,
// the sidecars' included, starts at once, and each sidecar waits for its
// turn (the app containers and the sidecars after it gone) only for its
// stop signal.
func TestSidecarPreStopHooksRunTogetherSignalsInReverseOrder(t *testing.T) {
	h := newHarness(t)
	p := withInit(pod("p", "u", v1.RestartPolicyNever, "app"), "sideA", "sideB")
	hook := &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"hook"}}}}
	p.Spec.InitContainers[0].Lifecycle, p.Spec.InitContainers[1].Lifecycle = hook, hook
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	h.reconcile()
	h.reconcile()
	h.now = h.now.Add(time.Second)
	acts := h.exit("u", "app", 0) // the pod is done: its sidecars stop
	var hooks []string
	for _, a := range kinds(acts, RunHook) {
		hooks = append(hooks, a.Container)
	}
	if !slices.Equal(hooks, []string{"sideB", "sideA"}) || len(kinds(acts, Signal)) != 0 {
		t.Fatalf("both preStop hooks at once, no signal yet: hooks %v, actions %+v", hooks, acts)
	}
	// sideA's hook ends first: it still waits for sideB.
	acts = h.m.HookDone("u", "sideA", h.container("u", "sideA").InstanceID, PreStop, nil, h.now)
	acts = append(acts, h.reconcile()...)
	if sig := kinds(acts, Signal); len(sig) != 0 {
		t.Fatalf("sideA signalled before sideB exited: %+v", sig)
	}
	acts = h.m.HookDone("u", "sideB", h.container("u", "sideB").InstanceID, PreStop, nil, h.now)
	acts = append(acts, h.reconcile()...)
	if sig := kinds(acts, Signal); len(sig) != 1 || sig[0].Container != "sideB" {
		t.Fatalf("sideB's signal after its hook: %+v", sig)
	}
	h.now = h.now.Add(time.Second)
	acts = h.exit("u", "sideB", 0)
	if sig := kinds(acts, Signal); len(sig) != 1 || sig[0].Container != "sideA" {
		t.Fatalf("sideA's turn once sideB exited: %+v", sig)
	}
}

// Hooks that never end: at the grace deadline every sidecar is signalled
// together and killed the minimum grace later.
func TestSidecarPreStopHooksThatNeverEndAreCutAtTheDeadline(t *testing.T) {
	h := newHarness(t)
	p := withInit(pod("p", "u", v1.RestartPolicyNever, "app"), "sideA", "sideB")
	hook := &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"hook"}}}}
	p.Spec.InitContainers[0].Lifecycle, p.Spec.InitContainers[1].Lifecycle = hook, hook
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	h.reconcile()
	h.reconcile()
	h.exit("u", "app", 0)
	if next := h.wake; !next.Equal(h.now.Add(30 * time.Second)) {
		t.Fatalf("next wake %v, want the grace deadline %v", next, h.now.Add(30*time.Second))
	}
	acts := h.advance(30 * time.Second)
	if sig := kinds(acts, Signal); len(sig) != 2 {
		t.Fatalf("at the deadline both sidecars signalled: %+v", acts)
	}
	if acts := h.advance(2 * time.Second); len(kinds(acts, Kill)) != 2 {
		t.Fatalf("both killed the minimum grace later: %+v", acts)
	}
}

// An httpGet preStop is bounded by the grace period; an exec one is not
// (the kubelet stops waiting at the deadline, the hook dies with its
// container).
func TestPreStopTimeoutByHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler v1.LifecycleHandler
		want    time.Duration
	}{
		{"exec", v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"hook"}}}, 0},
		{"httpGet", v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/"}}, 30 * time.Second},
	} {
		h := newHarness(t)
		p := pod("p", "u", v1.RestartPolicyAlways, "app")
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: &tc.handler}
		h.m.SetDesired([]*v1.Pod{p})
		h.reconcile()
		h.m.SetDesired(nil)
		if hooks := kinds(h.reconcile(), RunHook); len(hooks) != 1 || hooks[0].Timeout != tc.want {
			t.Errorf("%s preStop: %+v, want timeout %v", tc.name, hooks, tc.want)
		}
	}
}

// While the kubelet kills a container for a failed probe, its pod worker
// is blocked in that kill (preStop hook, then the wait for the exit):
// another container's failed liveness probe is recorded but killed only
// afterwards, and nothing of the pod starts or restarts meanwhile.
func TestProbeKillBlocksThePodLikeTheKubeletsSync(t *testing.T) {
	h := newHarness(t)
	p := withInit(preStopProbePod(), "side1")
	p.Spec.RestartPolicy = v1.RestartPolicyAlways
	p.Spec.InitContainers[0].LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"probe"}}}}
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	h.reconcile()
	h.m.Probed("u", "app", h.container("u", "app").InstanceID, Readiness, true, "", h.now)
	acts := h.m.Probed("u", "app", h.container("u", "app").InstanceID, Liveness, false, "exit 1", h.now)
	if len(kinds(acts, RunHook)) != 1 {
		t.Fatalf("app's kill begins with its preStop: %+v", acts)
	}
	side := h.container("u", "side1")
	acts = h.m.Probed("u", "side1", side.InstanceID, Liveness, false, "exit 1", h.now)
	if got := events(acts); !slices.Equal(got, []string{"Unhealthy: Liveness probe failed: exit 1"}) || side.Stop != nil {
		t.Fatalf("sidecar's failure while app is killed: events %q, stop %+v; want recorded, not killed", got, side.Stop)
	}
	h.now = h.now.Add(10 * time.Second)
	acts = h.m.HookDone("u", "app", h.container("u", "app").InstanceID, PreStop, nil, h.now)
	acts = append(acts, h.reconcile()...)
	if len(kinds(acts, Start)) != 0 || len(kinds(acts, Signal)) != 1 || kinds(acts, Signal)[0].Container != "app" {
		t.Fatalf("after app's preStop only app is signalled: %+v", acts)
	}
	// app exits: the pod's next sync kills the sidecar (its preStop-less
	// stop signal), and restarts nothing until the sidecar is gone.
	h.now = h.now.Add(time.Second)
	acts = h.exit("u", "app", 143)
	if sig := kinds(acts, Signal); len(sig) != 1 || sig[0].Container != "side1" || len(kinds(acts, Start)) != 0 {
		t.Fatalf("after app exited: the pending kill of side1 first, no start: %+v", acts)
	}
	if got := startedNames(h.exit("u", "side1", 143)); strings.Join(got, ",") != "side1,app" {
		t.Fatalf("once side1 is gone, both restart: %v", got)
	}
}
