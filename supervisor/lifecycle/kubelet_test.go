package lifecycle

import (
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// The tests in this file pin values the kubelet shows, item by item of
// issue 13, on a fake clock.

// The kubelet gives restart count N to the container it creates as the
// N+1th (kuberuntime startContainer: the last status's count plus one),
// and the status shows the newest container's count: waiting in
// CrashLoopBackOff after the second run shows 1, not 2.
func TestRestartCountIsGivenAtTheRestart(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("crash", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	rc := func() int32 { return h.status("u").ContainerStatuses[0].RestartCount }
	if got := rc(); got != 0 {
		t.Fatalf("first run: restartCount %d, want 0", got)
	}
	h.now = h.now.Add(time.Second)
	// The first exit restarts at once: the second instance is restart 1.
	if acts := h.exit("u", "c", 1); len(kinds(acts, Start)) != 1 {
		t.Fatalf("no immediate restart: %+v", acts)
	}
	if got := rc(); got != 1 {
		t.Fatalf("second run: restartCount %d, want 1", got)
	}
	h.now = h.now.Add(time.Second)
	h.exit("u", "c", 1)
	cs := h.status("u").ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" || cs.RestartCount != 1 {
		t.Fatalf("after the second run: state %+v restartCount %d, want CrashLoopBackOff with 1", cs.State, cs.RestartCount)
	}
	// A start that is issued but not yet answered changes nothing shown.
	h.now = h.now.Add(10 * time.Second)
	if acts := h.step(h.now); len(kinds(acts, Start)) != 1 {
		t.Fatalf("no restart after the backoff: %+v", acts)
	}
	if got := rc(); got != 1 {
		t.Fatalf("third start in flight: restartCount %d, want 1", got)
	}
	c := h.container("u", "c")
	h.m.Started("u", "c", c.InstanceID, h.now)
	if got := rc(); got != 2 {
		t.Fatalf("third run: restartCount %d, want 2", got)
	}
}

// An instance that was created but could not start (StartError, exit 128)
// is a container the kubelet counts: the next one is a restart.
func TestStartErrorCountsAsACreatedInstance(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	acts := h.step(h.now)
	id := kinds(acts, Start)[0].InstanceID
	h.m.Exited("u", "c", Termination{InstanceID: id, ExitCode: 128, Reason: "StartError", Message: "exec: no such file", FinishedAt: h.now})
	if got := h.status("u").ContainerStatuses[0].RestartCount; got != 0 {
		t.Fatalf("after the first StartError: restartCount %d, want 0", got)
	}
	h.reconcile() // restarted at once, and answered
	if got := h.status("u").ContainerStatuses[0].RestartCount; got != 1 {
		t.Fatalf("second instance: restartCount %d, want 1", got)
	}
}

func condition(st v1.PodStatus, typ v1.PodConditionType) v1.PodCondition {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c
		}
	}
	return v1.PodCondition{}
}

// lastTransitionTime moves only when a condition's status changes (the
// status manager's updateLastTransitionTime); Ready and ContainersReady
// name the unready containers as GenerateContainersReadyCondition does.
func TestConditionTransitionTimesAndMessages(t *testing.T) {
	h := newHarness(t)
	p := pod("p", "u", v1.RestartPolicyAlways, "a", "b")
	for i := range p.Spec.Containers {
		p.Spec.Containers[i].ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{}}}
	}
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	st := h.status("u")
	for _, typ := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		c := condition(st, typ)
		if c.Status != v1.ConditionFalse || c.Reason != "ContainersNotReady" || c.Message != "containers with unready status: [a b]" {
			t.Fatalf("%s before readiness = %+v", typ, c)
		}
		if !c.LastTransitionTime.Time.Equal(t0) {
			t.Fatalf("%s lastTransitionTime %v, want the creation %v", typ, c.LastTransitionTime, t0)
		}
	}
	h.now = t0.Add(3 * time.Second)
	h.m.Probed("u", "a", h.container("u", "a").InstanceID, Readiness, true, "", h.now)
	h.reconcile()
	if c := condition(h.status("u"), v1.PodReady); c.Message != "containers with unready status: [b]" || !c.LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("Ready with b unready = %+v, want the message naming b and the time unchanged", c)
	}
	h.now = t0.Add(8 * time.Second)
	h.m.Probed("u", "b", h.container("u", "b").InstanceID, Readiness, true, "", h.now)
	h.reconcile()
	h.now = t0.Add(20 * time.Second)
	h.reconcile()
	st = h.status("u")
	for _, typ := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		c := condition(st, typ)
		if c.Status != v1.ConditionTrue || c.Reason != "" || c.Message != "" || !c.LastTransitionTime.Time.Equal(t0.Add(8*time.Second)) {
			t.Fatalf("%s after readiness = %+v, want True since t0+8s", typ, c)
		}
	}
	if c := condition(st, v1.PodInitialized); !c.LastTransitionTime.Time.Equal(t0) {
		t.Fatalf("Initialized moved without a change: %+v", c)
	}
	// The transition times survive a save and a restore.
	r := newHarness(t)
	r.now = h.now
	r.m.Restore(roundTrip(t, h.m.Instance("u")), r.now)
	if c := condition(r.status("u"), v1.PodReady); !c.LastTransitionTime.Time.Equal(t0.Add(8 * time.Second)) {
		t.Fatalf("Ready after a restore = %+v", c)
	}
}

// Initialized lists every init container not completed; a failed pod's
// Ready and ContainersReady say PodFailed; its sandbox is gone.
func TestConditionsOfAFailedInitUnderNever(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyNever, "app"), "init1", "init2")})
	h.reconcile()
	st := h.status("u")
	if c := condition(st, v1.PodInitialized); c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" ||
		c.Message != "containers with incomplete status: [init1 init2]" {
		t.Fatalf("Initialized while init1 runs = %+v", c)
	}
	if w := initStatus(st, "init2").State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Fatalf("init2 not yet started waits with %+v, want PodInitializing", w)
	}
	if w := st.ContainerStatuses[0].State.Waiting; w == nil || w.Reason != "PodInitializing" {
		t.Fatalf("app waits with %+v, want PodInitializing", w)
	}
	h.now = h.now.Add(time.Second)
	h.exit("u", "init1", 1)
	st = h.status("u")
	if st.Phase != v1.PodFailed || st.Reason != "" || st.Message != "" {
		t.Fatalf("failed init under Never: phase %s reason %q message %q, want Failed with neither (the kubelet sets none)", st.Phase, st.Reason, st.Message)
	}
	if c := condition(st, v1.PodInitialized); c.Message != "containers with incomplete status: [init1 init2]" {
		t.Fatalf("Initialized after the failure = %+v", c)
	}
	for _, typ := range []v1.PodConditionType{v1.PodReady, v1.ContainersReady} {
		if c := condition(st, typ); c.Status != v1.ConditionFalse || c.Reason != "PodFailed" || c.Message != "" {
			t.Fatalf("%s of a failed pod = %+v, want False PodFailed", typ, c)
		}
	}
	if c := condition(st, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Fatalf("PodReadyToStartContainers of a finished pod = %+v, want False", c)
	}
}

// A pod that succeeded: Initialized True with PodCompleted, Ready False
// with PodCompleted.
func TestConditionsOfASucceededPod(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyNever, "app"), "i")})
	h.reconcile()
	h.exit("u", "i", 0)
	h.exit("u", "app", 0)
	st := h.status("u")
	if st.Phase != v1.PodSucceeded {
		t.Fatalf("phase %s", st.Phase)
	}
	if c := condition(st, v1.PodInitialized); c.Status != v1.ConditionTrue || c.Reason != "PodCompleted" {
		t.Fatalf("Initialized = %+v", c)
	}
	if c := condition(st, v1.PodReady); c.Status != v1.ConditionFalse || c.Reason != "PodCompleted" {
		t.Fatalf("Ready = %+v", c)
	}
	if c := condition(st, v1.PodReadyToStartContainers); c.Status != v1.ConditionFalse {
		t.Fatalf("PodReadyToStartContainers = %+v", c)
	}
}

// Every unmet readiness gate is named, joined by ", ".
func TestEveryUnmetReadinessGateIsNamed(t *testing.T) {
	h := newHarness(t)
	p := pod("p", "u", v1.RestartPolicyAlways, "app")
	p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: "example.com/a"}, {ConditionType: "example.com/b"}}
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	h.m.SetCondition("u", "example.com/b", false)
	c := condition(h.status("u"), v1.PodReady)
	want := `corresponding condition of pod readiness gate "example.com/a" does not exist., ` +
		`the status of pod readiness gate "example.com/b" is not "True", but False`
	if c.Reason != "ReadinessGatesNotReady" || c.Message != want {
		t.Fatalf("Ready = %+v, want message %q", c, want)
	}
}

// While its postStart hook runs, the kubelet still shows the status from
// before it created the container: waiting (ContainerCreating), not
// started, the previous restart count; the pod is Pending. An exec hook
// has no timeout.
func TestPostStartShowsTheContainerWaiting(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{hookPod(false, true)})
	acts := h.reconcile()
	hooks := kinds(acts, RunHook)
	if len(hooks) != 1 || hooks[0].Timeout != 0 {
		t.Fatalf("exec postStart: %+v, want one hook without a timeout", hooks)
	}
	st := h.status("u")
	cs := st.ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "ContainerCreating" || cs.ContainerID != "" || *cs.Started || cs.Ready {
		t.Fatalf("during postStart: %+v, want waiting ContainerCreating", cs)
	}
	if st.Phase != v1.PodPending {
		t.Fatalf("phase during the first postStart %s, want Pending", st.Phase)
	}
	id := h.container("u", "app").InstanceID
	h.now = h.now.Add(time.Hour) // no timeout: an hour later it still runs
	h.reconcile()
	if c := h.container("u", "app"); !c.PostStartActive || c.Stop != nil {
		t.Fatalf("postStart cut short: %+v", c)
	}
	h.m.HookDone("u", "app", id, PostStart, nil, h.now)
	h.reconcile()
	if cs := h.status("u").ContainerStatuses[0]; cs.State.Running == nil || cs.ContainerID == "" {
		t.Fatalf("after postStart: %+v, want running", cs.State)
	}
	// A restart: during its postStart the count is still the previous one.
	h.exit("u", "app", 1)
	if rc := h.status("u").ContainerStatuses[0].RestartCount; rc != 0 {
		t.Fatalf("during the second postStart: restartCount %d, want 0", rc)
	}
	h.m.HookDone("u", "app", h.container("u", "app").InstanceID, PostStart, nil, h.now)
	if rc := h.status("u").ContainerStatuses[0].RestartCount; rc != 1 {
		t.Fatalf("after the second postStart: restartCount %d, want 1", rc)
	}
}

// An httpGet postStart is bounded by the pod's grace period (the kubelet
// bounds it by its HTTP client); a sleep one, like exec, has no timeout.
func TestHTTPPostStartHasATimeout(t *testing.T) {
	h := newHarness(t)
	p := hookPod(false, true)
	p.Spec.Containers[0].Lifecycle.PostStart = &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/"}}
	h.m.SetDesired([]*v1.Pod{p})
	if hooks := kinds(h.reconcile(), RunHook); len(hooks) != 1 || hooks[0].Timeout != 30*time.Second {
		t.Fatalf("http postStart: %+v", hooks)
	}
	s := newHarness(t)
	p = hookPod(false, true)
	p.Spec.Containers[0].Lifecycle.PostStart = &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: 5}}
	s.m.SetDesired([]*v1.Pod{p})
	if hooks := kinds(s.reconcile(), RunHook); len(hooks) != 1 || hooks[0].Timeout != 0 {
		t.Fatalf("sleep postStart: %+v", hooks)
	}
}

// A pod a drain (or node shutdown) stopped runs again once revived, as a
// static pod does when its node boots: init containers first, then the
// app at once, its restart counted; a pod evicted for another reason is
// not revived.
func TestReviveAfterADrain(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{withInit(pod("p", "u", v1.RestartPolicyAlways, "app"), "i")})
	h.reconcile()
	h.exit("u", "i", 0)
	h.now = h.now.Add(time.Minute)
	acts := h.m.Fail("u", ReasonNodeShutdown, "Pod was terminated in response to imminent node shutdown.", 20*time.Second, h.now)
	if len(kinds(acts, Signal)) != 1 {
		t.Fatalf("the drain must stop the app: %+v", acts)
	}
	if h.m.Revive("u") {
		t.Fatal("revived while its container still runs")
	}
	h.exit("u", "app", 143)
	if st := h.status("u"); st.Phase != v1.PodFailed || st.Reason != ReasonNodeShutdown {
		t.Fatalf("after the drain: phase %s reason %q", st.Phase, st.Reason)
	}
	if acts := h.reconcile(); len(kinds(acts, Start)) != 0 {
		t.Fatalf("a drained pod restarted by itself: %+v", acts)
	}
	if !h.m.Revive("u") {
		t.Fatal("not revived")
	}
	if got := strings.Join(startedNames(h.reconcile()), ","); got != "i" {
		t.Fatalf("revived: started %q, want the init container first", got)
	}
	if got := strings.Join(startedNames(h.exit("u", "i", 0)), ","); got != "app" {
		t.Fatalf("after init: started %q, want the app at once", got)
	}
	st := h.status("u")
	cs := st.ContainerStatuses[0]
	if st.Phase != v1.PodRunning || st.Reason != "" || cs.State.Running == nil || cs.RestartCount != 1 ||
		cs.LastTerminationState.Terminated == nil || cs.LastTerminationState.Terminated.ExitCode != 143 {
		t.Fatalf("revived pod: phase %s reason %q %+v", st.Phase, st.Reason, cs)
	}

	// Evicted pods stay as they are.
	e := newHarness(t)
	e.m.SetDesired([]*v1.Pod{pod("q", "v", v1.RestartPolicyAlways, "app")})
	e.reconcile()
	e.m.Fail("v", "Evicted", "The node was low on resource: memory.", 0, e.now)
	e.exit("v", "app", 137)
	if e.m.Revive("v") {
		t.Fatal("an evicted pod was revived")
	}
}

// After a reboot a pod the shutdown stopped runs again (SandboxLost).
func TestSandboxLostRevivesAShutdownPod(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
	h.reconcile()
	h.m.Fail("u", ReasonNodeShutdown, "Pod was terminated in response to imminent node shutdown.", time.Second, h.now)
	h.exit("u", "app", 143)
	h.m.SandboxLost("u")
	if acts := h.reconcile(); len(kinds(acts, Start)) != 1 {
		t.Fatalf("after the boot: %+v, want the app started", acts)
	}
	if st := h.status("u"); st.Phase != v1.PodRunning {
		t.Fatalf("phase %s after the boot", st.Phase)
	}
}

// The kubelet's events for a container it could not create: "Error: " and
// the message (reason Failed); for a failed pull, the pull's own message
// then "Error: ErrImagePull".
func TestStartFailedEvents(t *testing.T) {
	for _, tc := range []struct {
		reason, message string
		want            []string
	}{
		{"CreateContainerError", "containerd is not configured", []string{"Failed: Error: containerd is not configured"}},
		{ErrImagePull, `failed to pull image "x": not found`, []string{`Failed: failed to pull image "x": not found`, "Failed: Error: ErrImagePull"}},
		{ErrImageNeverPull, `Container image "x" is not present with pull policy of Never`,
			[]string{`ErrImageNeverPull: Container image "x" is not present with pull policy of Never`, "Failed: Error: ErrImageNeverPull"}},
	} {
		h := newHarness(t)
		h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "app")})
		id := kinds(h.step(h.now), Start)[0].InstanceID
		var got []string
		for _, a := range kinds(h.m.StartFailed("u", "app", id, tc.reason, tc.message, h.now), Record) {
			if a.EventType == "Warning" {
				got = append(got, a.Reason+": "+a.Message)
			}
		}
		if strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s: events %q, want %q", tc.reason, got, tc.want)
		}
	}
}

// A record saved before restart counts were given at creation, of a
// container waiting to restart after two runs, said 2; restored, it says
// the kubelet's 1, and the restart to come makes it 2.
func TestOldRecordRestartCountIsConverted(t *testing.T) {
	h := newHarness(t)
	p := pod("p", "u", v1.RestartPolicyAlways, "c")
	in := newInstance(p, t0)
	in.CountsAtCreation = false
	c := in.Containers[0]
	c.Phase, c.Attempt, c.RestartCount, c.NotBefore = Waiting, 2, 2, t0.Add(10*time.Second)
	c.Last = &Termination{InstanceID: "u_c_2", ExitCode: 1, StartedAt: t0, FinishedAt: t0}
	h.m.Restore(roundTrip(t, in), t0)
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	if got := h.status("u").ContainerStatuses[0].RestartCount; got != 1 {
		t.Fatalf("restored old record: restartCount %d, want 1", got)
	}
	h.advance(10 * time.Second)
	if c := h.container("u", "c"); c.Phase != Running || c.RestartCount != 2 {
		t.Fatalf("after the restart: %+v, want running with 2", c)
	}
	// A new record is never converted twice.
	r := newHarness(t)
	r.m.Restore(roundTrip(t, h.m.Instance("u")), r.now)
	if got := r.container("u", "c").RestartCount; got != 2 {
		t.Fatalf("restored new record: restartCount %d, want 2", got)
	}
}

func events(acts []Action) []string {
	var out []string
	for _, a := range kinds(acts, Record) {
		out = append(out, a.Reason+": "+a.Message)
	}
	return out
}

// The kubelet's events when it kills a container: one Killing event that
// names the failed probe and whether a restart follows; a failed hook's
// output, which may hold secrets, is in no event.
func TestKillEvents(t *testing.T) {
	for policy, want := range map[v1.RestartPolicy]string{
		v1.RestartPolicyAlways: "Unhealthy: Liveness probe failed: HTTP 500|Killing: Container app failed liveness probe, will be restarted",
		v1.RestartPolicyNever:  "Unhealthy: Liveness probe failed: HTTP 500|Killing: Container app failed liveness probe",
	} {
		h := newHarness(t)
		p := probePod()
		p.Spec.RestartPolicy = policy
		h.m.SetDesired([]*v1.Pod{p})
		h.reconcile()
		acts := h.m.Probed("u", "app", h.container("u", "app").InstanceID, Liveness, false, "HTTP 500", h.now)
		if got := strings.Join(events(acts), "|"); got != want {
			t.Errorf("%s: events %q, want %q", policy, got, want)
		}
	}
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{hookPod(true, true)})
	h.reconcile()
	id := h.container("u", "app").InstanceID
	acts := h.m.HookDone("u", "app", id, PostStart, errors.New("exit 1: password=hunter2"), h.now)
	if got, want := strings.Join(events(acts), "|"), "FailedPostStartHook: PostStartHook failed|Killing: FailedPostStartHook"; got != want {
		t.Fatalf("postStart failure: events %q, want %q", got, want)
	}
	acts = h.m.HookDone("u", "app", id, PreStop, errors.New("password=hunter2"), h.now)
	if got := strings.Join(events(acts), "|"); got != "FailedPreStopHook: PreStopHook failed" {
		t.Fatalf("preStop failure: events %q", got)
	}
}
