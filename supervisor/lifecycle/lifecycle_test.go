package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

var always = v1.ContainerRestartPolicyAlways

// withInit adds init containers; names starting with "side" are sidecars.
func withInit(p *v1.Pod, names ...string) *v1.Pod {
	for _, n := range names {
		c := v1.Container{Name: n, Image: "host"}
		if strings.HasPrefix(n, "side") {
			c.RestartPolicy = &always
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	return p
}

func startedNames(acts []Action) []string {
	var out []string
	for _, a := range kinds(acts, Start) {
		out = append(out, a.Container)
	}
	return out
}

func initStatus(st v1.PodStatus, name string) v1.ContainerStatus {
	for _, cs := range st.InitContainerStatuses {
		if cs.Name == name {
			return cs
		}
	}
	return v1.ContainerStatus{}
}

func TestInitContainersRunInOrder(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyAlways, "app"), "i1", "i2")})
	if got := startedNames(h.reconcile()); strings.Join(got, ",") != "i1" {
		t.Fatalf("first start = %v, want only i1", got)
	}
	st := h.status("u")
	if st.Phase != v1.PodPending || podCondition(st, v1.PodInitialized) ||
		st.ContainerStatuses[0].State.Waiting.Reason != "PodInitializing" {
		t.Fatalf("while initializing: %+v", st)
	}
	if got := startedNames(h.exit("u", "i1", 0)); strings.Join(got, ",") != "i2" {
		t.Fatalf("after i1: %v", got)
	}
	if got := startedNames(h.exit("u", "i2", 0)); strings.Join(got, ",") != "app" {
		t.Fatalf("after i2: %v", got)
	}
	st = h.status("u")
	if st.Phase != v1.PodRunning || !podCondition(st, v1.PodInitialized) || !podCondition(st, v1.PodReady) {
		t.Fatalf("after init: %+v", st)
	}
	if cs := initStatus(st, "i1"); cs.State.Terminated == nil || cs.State.Terminated.Reason != "Completed" {
		t.Fatalf("init status: %+v", cs)
	}
}

func TestFailingInitContainer(t *testing.T) {
	cases := []struct {
		policy   v1.RestartPolicy
		retried  bool
		phase    v1.PodPhase
		appStart bool
	}{
		{v1.RestartPolicyAlways, true, v1.PodPending, false},
		{v1.RestartPolicyOnFailure, true, v1.PodPending, false},
		{v1.RestartPolicyNever, false, v1.PodFailed, false},
	}
	for _, tc := range cases {
		t.Run(string(tc.policy), func(t *testing.T) {
			h := newHarness(t)
			h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", tc.policy, "app"), "i1")})
			h.reconcile()
			acts := h.exit("u", "i1", 1) // first retry is immediate
			if got := startedNames(acts); (len(got) == 1 && got[0] == "i1") != tc.retried {
				t.Fatalf("retried = %v, want %v", got, tc.retried)
			}
			if tc.retried {
				acts = h.exit("u", "i1", 1) // second failure: backoff
				if len(kinds(acts, Start)) != 0 || initStatus(h.status("u"), "i1").State.Waiting.Reason != "CrashLoopBackOff" {
					t.Fatalf("second failure must back off: %+v", acts)
				}
			}
			if ph := h.status("u").Phase; ph != tc.phase {
				t.Fatalf("phase = %s, want %s", ph, tc.phase)
			}
			for _, a := range h.log {
				if a.Kind == Start && a.Container == "app" {
					t.Fatal("an app container started after its init container failed")
				}
			}
		})
	}
}

func TestSidecarsStartInOrderAndKeepRunning(t *testing.T) {
	h := newHarness(t)
	p := withInit(pod("p", "u", v1.RestartPolicyNever, "app"), "side1", "init2")
	p.Spec.InitContainers[0].StartupProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: []string{"true"}}}}
	h.m.SetDesired([]*v1.Pod{p})
	acts := h.reconcile()
	if got := startedNames(acts); strings.Join(got, ",") != "side1" || len(kinds(acts, Probe)) != 1 {
		t.Fatalf("start = %v, probes %d", got, len(kinds(acts, Probe)))
	}
	if got := startedNames(h.reconcile()); len(got) != 0 {
		t.Fatalf("init2 started before the sidecar's startup probe passed: %v", got)
	}
	c := h.container("u", "side1")
	h.m.Probed("u", "side1", c.InstanceID, Startup, true, "", h.now)
	if got := startedNames(h.reconcile()); strings.Join(got, ",") != "init2" {
		t.Fatalf("after sidecar started: %v", got)
	}
	if got := startedNames(h.exit("u", "init2", 0)); strings.Join(got, ",") != "app" {
		t.Fatalf("after init2: %v", got)
	}
	// A sidecar restarts even under restartPolicy Never.
	if got := startedNames(h.exit("u", "side1", 1)); strings.Join(got, ",") != "side1" {
		t.Fatalf("sidecar not restarted: %v", got)
	}
	c = h.container("u", "side1")
	h.m.Probed("u", "side1", c.InstanceID, Startup, true, "", h.now)
	h.reconcile()
	st := h.status("u")
	if !initStatus(st, "side1").Ready || !podCondition(st, v1.ContainersReady) {
		t.Fatalf("sidecar must count toward readiness: %+v", st)
	}
	// The app finishing ends the pod: the sidecar is stopped.
	acts = h.exit("u", "app", 0)
	if sig := kinds(acts, Signal); len(sig) != 1 || sig[0].Container != "side1" {
		t.Fatalf("sidecar not stopped after the app completed: %+v", acts)
	}
	// The kubelet's getPhase counts a running sidecar: the pod stays
	// Running until its sidecars stopped.
	if ph := h.status("u").Phase; ph != v1.PodRunning {
		t.Fatalf("phase = %s while the sidecar still runs, want Running", ph)
	}
	h.exit("u", "side1", 143)
	if ph := h.status("u").Phase; ph != v1.PodSucceeded {
		t.Fatalf("phase = %s: sidecar exit codes must not fail the pod", ph)
	}
}

func TestTerminationStopsSidecarsLastInReverseOrder(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyAlways, "app"), "sideA", "sideB")})
	h.reconcile()
	h.reconcile()
	h.reconcile()
	h.m.SetDesired(nil)
	acts := h.reconcile()
	if sig := kinds(acts, Signal); len(sig) != 1 || sig[0].Container != "app" {
		t.Fatalf("first the app container: %+v", sig)
	}
	acts = h.exit("u", "app", 143)
	if sig := kinds(acts, Signal); len(sig) != 1 || sig[0].Container != "sideB" {
		t.Fatalf("then the last sidecar: %+v", sig)
	}
	acts = h.exit("u", "sideB", 143)
	if sig := kinds(acts, Signal); len(sig) != 1 || sig[0].Container != "sideA" {
		t.Fatalf("then the first sidecar: %+v", sig)
	}
	if acts := h.exit("u", "sideA", 143); len(kinds(acts, Forget)) != 1 {
		t.Fatalf("then forgotten: %+v", acts)
	}
}

func TestSidecarsStillRunningAtTheDeadlineAreSignalledTogether(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyAlways, "app"), "sideA", "sideB")})
	h.reconcile()
	h.reconcile()
	h.reconcile()
	h.m.SetDesired(nil)
	h.reconcile()
	acts := h.advance(30 * time.Second) // app ignored SIGTERM
	if len(kinds(acts, Kill)) != 1 || len(kinds(acts, Signal)) != 2 {
		t.Fatalf("at the deadline: kill the app, signal both sidecars: %+v", acts)
	}
	if acts := h.advance(2 * time.Second); len(kinds(acts, Kill)) != 2 {
		t.Fatalf("sidecars killed 2s later: %+v", acts)
	}
}

func hookPod(preStop, postStart bool) *v1.Pod {
	p := pod("p", "u", v1.RestartPolicyAlways, "app", "second")
	lc := &v1.Lifecycle{}
	h := &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"hook"}}}
	if preStop {
		lc.PreStop = h
	}
	if postStart {
		lc.PostStart = h
	}
	p.Spec.Containers[0].Lifecycle = lc
	return p
}

func TestPostStartBlocksAndFailureKills(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{hookPod(false, true)})
	acts := h.reconcile()
	hooks := kinds(acts, RunHook)
	if got := startedNames(acts); strings.Join(got, ",") != "app" || len(hooks) != 1 || hooks[0].Hook != PostStart {
		t.Fatalf("app first with its postStart: %v %+v", got, hooks)
	}
	if cs := h.status("u").ContainerStatuses[0]; *cs.Started || cs.Ready {
		t.Fatal("a container is not started while its postStart runs")
	}
	c := h.container("u", "app")
	acts = h.m.HookDone("u", "app", c.InstanceID, PostStart, errors.New("exit 1"), h.now)
	acts = append(acts, h.reconcile()...)
	if len(kinds(acts, Signal)) != 1 || !hasRecord(acts, "FailedPostStartHook") {
		t.Fatalf("failed postStart must kill the container: %+v", acts)
	}
	// The kubelet kills it within the sync that started it, and only
	// then starts the next container.
	if got := startedNames(acts); len(got) != 0 {
		t.Fatalf("the next container started while the failed one is killed: %v", got)
	}
	if got := startedNames(h.exit("u", "app", 143)); strings.Join(got, ",") != "app" {
		t.Fatalf("once it exited, restarted per policy (its postStart holding back the next): %v", got)
	}
}

func hasRecord(acts []Action, reason string) bool {
	for _, a := range kinds(acts, Record) {
		if a.Reason == reason {
			return true
		}
	}
	return false
}

func TestPreStopRunsFirstAndItsTimeIsSubtracted(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{hookPod(true, false)})
	h.reconcile()
	h.m.SetDesired(nil)
	acts := h.reconcile()
	hooks := kinds(acts, RunHook)
	// An exec preStop has no timeout: the signal goes out at the grace
	// deadline, but the kubelet leaves the hook running until its
	// container dies.
	if len(hooks) != 1 || hooks[0].Hook != PreStop || hooks[0].Timeout != 0 {
		t.Fatalf("preStop with no timeout: %+v", hooks)
	}
	for _, s := range kinds(acts, Signal) {
		if s.Container == "app" {
			t.Fatal("signal sent before preStop finished")
		}
	}
	h.now = h.now.Add(10 * time.Second)
	c := h.container("u", "app")
	h.m.HookDone("u", "app", c.InstanceID, PreStop, nil, h.now)
	if sig := kinds(h.reconcile(), Signal); len(sig) != 1 || sig[0].Container != "app" || sig[0].Signal != "SIGTERM" {
		t.Fatalf("signal after preStop: %+v", sig)
	}
	if got := c.Stop.KillAt.Sub(h.now); got != 20*time.Second {
		t.Fatalf("SIGKILL in %v, want the 20s left of 30s", got)
	}
}

func TestPreStopOverrunningTheGrace(t *testing.T) {
	h := newHarness(t)
	p := hookPod(true, false)
	g := int64(5)
	p.Spec.TerminationGracePeriodSeconds = &g
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	h.m.SetDesired(nil)
	h.reconcile()
	if sig := kinds(h.advance(5*time.Second), Signal); len(sig) != 1 || sig[0].Container != "app" {
		t.Fatalf("at the deadline the signal goes out despite the hook: %+v", sig)
	}
	if k := kinds(h.advance(2*time.Second-time.Millisecond), Kill); len(k) != 0 {
		t.Fatal("killed before the 2s minimum after the signal")
	}
	if k := kinds(h.advance(time.Millisecond), Kill); len(k) != 1 {
		t.Fatal("not killed 2s after the signal")
	}
}

func TestStopSignalFromSpec(t *testing.T) {
	h := newHarness(t)
	p := pod("p", "u", v1.RestartPolicyAlways, "app")
	sig := v1.SIGINT
	p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{StopSignal: &sig}
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	h.m.SetDesired(nil)
	if s := kinds(h.reconcile(), Signal); len(s) != 1 || s[0].Signal != "SIGINT" {
		t.Fatalf("signal = %+v", s)
	}
}

func probePod() *v1.Pod {
	p := pod("p", "u", v1.RestartPolicyAlways, "app")
	g := int64(3)
	h := v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{}}
	p.Spec.Containers[0].StartupProbe = &v1.Probe{ProbeHandler: h}
	p.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: h, TerminationGracePeriodSeconds: &g}
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{ProbeHandler: h}
	return p
}

func TestProbesDriveStartedReadyAndRestarts(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{probePod()})
	h.reconcile()
	id := h.container("u", "app").InstanceID
	cs := h.status("u").ContainerStatuses[0]
	if *cs.Started || cs.Ready {
		t.Fatalf("before the startup probe: %+v", cs)
	}
	h.m.Probed("u", "app", id, Readiness, true, "", h.now)
	if h.status("u").ContainerStatuses[0].Ready {
		t.Fatal("ready before started")
	}
	h.m.Probed("u", "app", id, Startup, true, "", h.now)
	st := h.status("u")
	if !*st.ContainerStatuses[0].Started || !st.ContainerStatuses[0].Ready || !podCondition(st, v1.PodReady) {
		t.Fatalf("after startup and readiness: %+v", st)
	}
	acts := h.m.Probed("u", "app", id, Readiness, false, "HTTP 503", h.now)
	if st := h.status("u"); podCondition(st, v1.PodReady) || !hasRecord(acts, "Unhealthy") {
		t.Fatalf("readiness failure must clear Ready: %+v", st.Conditions)
	}
	acts = h.m.Probed("u", "app", id, Liveness, false, "connection refused", h.now)
	if len(kinds(acts, Signal)) != 1 || len(kinds(acts, Unprobe)) != 1 {
		t.Fatalf("liveness failure must stop the container: %+v", acts)
	}
	if got := h.container("u", "app").Stop.KillAt.Sub(h.now); got != 3*time.Second {
		t.Fatalf("probe-level grace: SIGKILL in %v, want 3s", got)
	}
	if acts := h.exit("u", "app", 143); len(kinds(acts, Start)) != 1 {
		t.Fatalf("restarted after the liveness kill: %+v", acts)
	}
}

func TestReadinessGates(t *testing.T) {
	h := newHarness(t)
	p := pod("p", "u", v1.RestartPolicyAlways, "app")
	p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/lb"}}
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	st := h.status("u")
	if podCondition(st, v1.PodReady) || !podCondition(st, v1.ContainersReady) || st.Conditions[2].Reason != "ReadinessGatesNotReady" {
		t.Fatalf("gate unset: %+v", st.Conditions)
	}
	h.m.SetCondition("u", "example.com/lb", true)
	if st := h.status("u"); !podCondition(st, v1.PodReady) || !podCondition(st, "example.com/lb") {
		t.Fatalf("gate set: %+v", st.Conditions)
	}
}

func TestDeleteGraceOnlyShortens(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	ten, hundred := 10*time.Second, 100*time.Second
	h.m.Delete("u", &ten, false, h.now)
	h.reconcile()
	if got := h.container("u", "app").Stop.KillAt.Sub(h.now); got != 10*time.Second {
		t.Fatalf("override: kill in %v", got)
	}
	h.m.Delete("u", &hundred, false, h.now)
	h.reconcile()
	if got := h.container("u", "app").Stop.KillAt.Sub(h.now); got != 10*time.Second {
		t.Fatalf("a grace period must never lengthen: kill in %v", got)
	}
	h.now = h.now.Add(time.Second)
	zero := time.Duration(0)
	h.m.Delete("u", &zero, true, h.now)
	if k := kinds(h.reconcile(), Kill); len(k) != 1 {
		t.Fatalf("force must kill at once: %+v", k)
	}
}

func TestRestoreDuringTerminationRestartsTheGrace(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	h.m.SetDesired(nil)
	h.reconcile()
	in := h.m.Instance("u")
	// A new daemon 20s later restores the record.
	h.now = h.now.Add(20 * time.Second)
	m2 := NewMachine(DefaultConfig())
	m2.Restore(in, h.now)
	h.m = m2
	acts := h.reconcile()
	if sig := kinds(acts, Signal); len(sig) != 1 {
		t.Fatalf("the stop signal must be sent again: %+v", acts)
	}
	if got := h.container("u", "app").Stop.KillAt.Sub(h.now); got != 30*time.Second {
		t.Fatalf("grace must restart in full: kill in %v", got)
	}
}

// A forced stop whose SIGKILL was recorded as sent before the daemon died
// (kill -9 between the record and the kill) sends it again after restore.
func TestRestoreOfAForcedStopKillsAgain(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	zero := time.Duration(0)
	h.m.Delete("u", &zero, true, h.now)
	if k := kinds(h.reconcile(), Kill); len(k) != 1 {
		t.Fatalf("force must kill at once: %+v", k)
	}
	in := roundTrip(t, h.m.Instance("u"))
	h.now = h.now.Add(5 * time.Second)
	h.m = NewMachine(DefaultConfig())
	h.m.Restore(in, h.now)
	if k := kinds(h.reconcile(), Kill); len(k) != 1 {
		t.Fatalf("the restored forced stop must kill again: %+v", k)
	}
}

func TestActiveDeadline(t *testing.T) {
	h := newHarness(t)
	p := withInit(pod("p", "u", v1.RestartPolicyAlways, "app"), "i1")
	d := int64(60)
	p.Spec.ActiveDeadlineSeconds = &d
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile() // i1 runs and never finishes: the deadline counts init too
	if !h.wake.Equal(h.now.Add(time.Minute)) {
		t.Fatalf("wake at %v", h.wake.Sub(h.now))
	}
	acts := h.advance(time.Minute)
	if len(kinds(acts, Signal)) != 1 || !hasRecord(acts, "DeadlineExceeded") {
		t.Fatalf("deadline must stop the pod: %+v", acts)
	}
	acts = h.exit("u", "i1", 143)
	st := h.status("u")
	if len(kinds(acts, Start)) != 0 || st.Phase != v1.PodFailed || st.Reason != "DeadlineExceeded" {
		t.Fatalf("after the deadline: %+v %+v", acts, st)
	}
	// The kubelet's text, with nothing appended.
	if want := "Pod was active on the node longer than the specified deadline"; st.Message != want {
		t.Fatalf("message %q, want %q", st.Message, want)
	}
}

func TestSandboxLostRerunsInit(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyAlways, "app"), "i1")})
	h.reconcile()
	h.exit("u", "i1", 0)
	h.exit("u", "app", 137) // the device rebooted: app gone
	h.m.SandboxLost("u")
	if got := startedNames(h.reconcile()); strings.Join(got, ",") != "i1" {
		t.Fatalf("init must run again after a pod restart: %v", got)
	}
}

func TestRecreatedInstanceNeverReusesContainerIDs(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	first := h.container("u", "app").InstanceID
	h.m.Delete("u", nil, false, h.now)
	h.reconcile()
	acts := h.exit("u", "app", 143)
	starts := kinds(acts, Start)
	if len(kinds(acts, Forget)) != 1 || len(starts) != 1 || starts[0].InstanceID == first {
		t.Fatalf("recreated after delete must start with a new container ID (was %s): %+v", first, acts)
	}
}
