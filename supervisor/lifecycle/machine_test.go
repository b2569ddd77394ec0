package lifecycle

import (
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// harness drives a Machine with a fake clock and answers Start actions the
// way a runtime would, so tests read as a timeline.
type harness struct {
	t   *testing.T
	m   *Machine
	now time.Time
	log []Action
	// wake is the NextWake of the last Ready; starts counts the Starts
	// every Ready emitted.
	wake   time.Time
	starts int
}

func newHarness(t *testing.T) *harness {
	return &harness{t: t, m: NewMachine(DefaultConfig()), now: t0}
}

func pod(name string, uid string, policy v1.RestartPolicy, containers ...string) *v1.Pod {
	grace := int64(30)
	p := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID(uid)},
		Spec:       v1.PodSpec{RestartPolicy: policy, TerminationGracePeriodSeconds: &grace},
	}
	for _, c := range containers {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: c, Image: "host"})
	}
	return p
}

// reconcile runs the machine and acknowledges every Start immediately.
func (h *harness) reconcile() []Action {
	h.t.Helper()
	acts := h.step(h.now)
	for _, a := range acts {
		if a.Kind == Start {
			acts = append(acts, h.observed(h.m.Started(a.Pod, a.Container, a.InstanceID, h.now))...)
		}
	}
	h.log = append(h.log, acts...)
	return acts
}

// step asks the machine for one Ready at now, fails the test if a Start
// in it could leave before its record is saved (savedFirst), and
// acknowledges it.
func (h *harness) step(now time.Time) []Action {
	h.t.Helper()
	rd := h.m.Ready(now)
	if err := savedFirst(rd); err != nil {
		h.t.Fatal(err)
	}
	h.wake = rd.NextWake
	h.starts += len(kinds(rd.Actions, Start))
	h.m.Advance(rd)
	return rd.Actions
}

// observed checks the actions an observation returned: they leave at
// once, with no save before them, so none may be a Start.
func (h *harness) observed(acts []Action) []Action {
	h.t.Helper()
	if starts := kinds(acts, Start); len(starts) > 0 {
		h.t.Fatalf("an observation returned a Start, which no save precedes: %+v", starts)
	}
	return acts
}

func (h *harness) container(uid, name string) *Container {
	in := h.m.Instance(types.UID(uid))
	if in == nil {
		h.t.Fatalf("no instance %s", uid)
	}
	return in.Container(name)
}

func (h *harness) exit(uid, name string, code int32) []Action {
	h.t.Helper()
	c := h.container(uid, name)
	acts := h.observed(h.m.Exited(types.UID(uid), name, Termination{InstanceID: c.InstanceID, ExitCode: code, FinishedAt: h.now}))
	return append(acts, h.reconcile()...)
}

func (h *harness) advance(d time.Duration) []Action {
	h.t.Helper()
	h.now = h.now.Add(d)
	return h.reconcile()
}

func kinds(acts []Action, k ActionKind) (out []Action) {
	for _, a := range acts {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

func (h *harness) status(uid string) v1.PodStatus {
	return h.m.PodView(h.m.Instance(types.UID(uid)), h.now).Status
}

func TestStartsEveryContainerOnce(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("web", "u1", v1.RestartPolicyAlways, "a", "b")})
	starts := kinds(h.reconcile(), Start)
	if len(starts) != 2 || starts[0].InstanceID != "u1_a_1" || starts[1].InstanceID != "u1_b_1" {
		t.Fatalf("starts = %+v", starts)
	}
	if again := kinds(h.reconcile(), Start); len(again) != 0 {
		t.Fatalf("second reconcile started again: %+v", again)
	}
	st := h.status("u1")
	if st.Phase != v1.PodRunning || st.ContainerStatuses[0].State.Running == nil {
		t.Fatalf("status = %+v", st)
	}
	if !podCondition(st, v1.PodReady) || !podCondition(st, v1.ContainersReady) {
		t.Fatalf("pod not ready: %+v", st.Conditions)
	}
}

func podCondition(st v1.PodStatus, typ v1.PodConditionType) bool {
	for _, c := range st.Conditions {
		if c.Type == typ {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func TestRestartPolicyByExitCode(t *testing.T) {
	cases := []struct {
		policy    v1.RestartPolicy
		code      int32
		restart   bool
		phase     v1.PodPhase
		reasonNow string
	}{
		{v1.RestartPolicyAlways, 0, true, v1.PodRunning, ""},
		{v1.RestartPolicyAlways, 1, true, v1.PodRunning, ""},
		{v1.RestartPolicyOnFailure, 0, false, v1.PodSucceeded, "Completed"},
		{v1.RestartPolicyOnFailure, 2, true, v1.PodRunning, ""},
		{v1.RestartPolicyNever, 0, false, v1.PodSucceeded, "Completed"},
		{v1.RestartPolicyNever, 3, false, v1.PodFailed, "Error"},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/exit%d", tc.policy, tc.code), func(t *testing.T) {
			h := newHarness(t)
			h.m.SetDesired([]*v1.Pod{pod("p", "u", tc.policy, "c")})
			h.reconcile()
			h.now = h.now.Add(time.Minute)
			acts := h.exit("u", "c", tc.code)
			restarted := len(kinds(acts, Start)) == 1
			if restarted != tc.restart {
				t.Fatalf("restarted = %v, want %v (actions %+v)", restarted, tc.restart, acts)
			}
			st := h.status("u")
			if st.Phase != tc.phase {
				t.Fatalf("phase = %s, want %s", st.Phase, tc.phase)
			}
			cs := st.ContainerStatuses[0]
			if tc.restart {
				if cs.RestartCount != 1 || cs.LastTerminationState.Terminated == nil ||
					cs.LastTerminationState.Terminated.ExitCode != tc.code {
					t.Fatalf("after restart: %+v", cs)
				}
			} else if cs.State.Terminated == nil || cs.State.Terminated.Reason != tc.reasonNow ||
				cs.State.Terminated.ExitCode != tc.code {
				t.Fatalf("terminated state = %+v", cs.State)
			}
		})
	}
}

func TestBackoffSequenceAndCrashLoopReason(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("crash", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	// Expected wait before each restart: 0, 10, 20, 40, 80, 160, 300, 300.
	want := []time.Duration{0, 10, 20, 40, 80, 160, 300, 300}
	for i, w := range want {
		h.now = h.now.Add(time.Second) // runs one second, then crashes
		acts := h.exit("u", "c", 1)
		if w == 0 {
			if len(kinds(acts, Start)) != 1 {
				t.Fatalf("restart %d: want immediate start, got %+v", i+1, acts)
			}
			continue
		}
		if len(kinds(acts, Start)) != 0 || len(kinds(acts, Record)) == 0 {
			t.Fatalf("restart %d: want BackOff without start, got %+v", i+1, acts)
		}
		if wake := h.wake; !wake.Equal(h.now.Add(w * time.Second)) {
			t.Fatalf("restart %d: wake %v, want +%ds", i+1, wake.Sub(h.now), w)
		}
		cs := h.status("u").ContainerStatuses[0]
		if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" {
			t.Fatalf("restart %d: state %+v", i+1, cs.State)
		}
		if acts := h.advance(w*time.Second - time.Millisecond); len(kinds(acts, Start)) != 0 {
			t.Fatalf("restart %d: started before backoff expired", i+1)
		}
		if acts := h.advance(time.Millisecond); len(kinds(acts, Start)) != 1 {
			t.Fatalf("restart %d: not started at backoff expiry", i+1)
		}
	}
	if rc := h.status("u").ContainerStatuses[0].RestartCount; rc != int32(len(want)) {
		t.Fatalf("restartCount = %d", rc)
	}
}

func TestBackoffResetsAfterCleanRun(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	for i := 0; i < 3; i++ { // build up backoff: 0, 10s, 20s
		h.now = h.now.Add(time.Second)
		h.exit("u", "c", 1)
		h.advance(time.Hour)
	}
	h.now = h.now.Add(10 * time.Minute) // a clean run of exactly the reset time
	if acts := h.exit("u", "c", 1); len(kinds(acts, Start)) != 1 {
		t.Fatalf("after a 10 min run the restart must be immediate: %+v", acts)
	}
}

func TestConfigurableBackoff(t *testing.T) {
	h := newHarness(t)
	h.m = NewMachine(Config{BackoffInitial: time.Second, BackoffMax: 3 * time.Second, BackoffReset: time.Minute})
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	for _, w := range []time.Duration{0, 1, 2, 3, 3} {
		h.exit("u", "c", 1)
		if w > 0 && !h.wake.Equal(h.now.Add(w*time.Second)) {
			t.Fatalf("want wait %ds, wake in %v", w, h.wake.Sub(h.now))
		}
		h.advance(w * time.Second)
	}
}

func TestRemovedPodStopsGracefullyThenKills(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	h.m.SetDesired(nil)
	acts := h.advance(time.Second)
	if len(kinds(acts, Signal)) != 1 || len(kinds(acts, Kill)) != 0 {
		t.Fatalf("want one Stop: %+v", acts)
	}
	if !h.wake.Equal(h.now.Add(30 * time.Second)) {
		t.Fatalf("kill timer at %v", h.wake.Sub(h.now))
	}
	if acts := h.advance(29 * time.Second); len(kinds(acts, Kill))+len(kinds(acts, Signal)) != 0 {
		t.Fatalf("acted before the grace period ran out: %+v", acts)
	}
	if acts := h.advance(time.Second); len(kinds(acts, Kill)) != 1 {
		t.Fatalf("want Kill at the deadline: %+v", acts)
	}
	acts = h.exit("u", "c", 137)
	if len(kinds(acts, Forget)) != 1 || len(kinds(acts, Start)) != 0 || h.m.Instance("u") != nil {
		t.Fatalf("want the instance forgotten, not restarted: %+v", acts)
	}
}

func TestMinimumGracePeriod(t *testing.T) {
	h := newHarness(t)
	p := pod("p", "u", v1.RestartPolicyAlways, "c")
	zero := int64(0)
	p.Spec.TerminationGracePeriodSeconds = &zero
	h.m.SetDesired([]*v1.Pod{p})
	h.reconcile()
	h.m.SetDesired(nil)
	h.reconcile()
	if got := h.wake.Sub(h.now); got != 2*time.Second {
		t.Fatalf("grace = %v, want the 2s minimum", got)
	}
}

func TestChangedPodWaitsForOldInstance(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "old", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	h.m.SetDesired([]*v1.Pod{pod("p", "new", v1.RestartPolicyAlways, "c")})
	acts := h.reconcile()
	if len(kinds(acts, Start)) != 0 || len(kinds(acts, Signal)) != 1 {
		t.Fatalf("new instance must wait for the old one: %+v", acts)
	}
	if h.m.Instance("new") != nil {
		t.Fatal("new instance created while old is live")
	}
	acts = h.exit("old", "c", 143)
	starts := kinds(acts, Start)
	if len(starts) != 1 || starts[0].Pod != "new" || len(kinds(acts, Forget)) != 1 {
		t.Fatalf("want old forgotten and new started: %+v", acts)
	}
}

func TestStopWaitsForInFlightStart(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	acts := h.step(h.now) // the start is not answered yet
	start := kinds(acts, Start)[0]
	h.m.SetDesired(nil)
	if acts := h.step(h.now); len(kinds(acts, Forget)) != 0 {
		t.Fatalf("forgot an instance whose start is in flight: %+v", acts)
	}
	h.m.Started(start.Pod, start.Container, start.InstanceID, h.now)
	if acts := h.step(h.now); len(kinds(acts, Signal)) != 1 {
		t.Fatalf("want Stop once the start is answered: %+v", acts)
	}
}

func TestStartErrorIsATerminationWithBackoff(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	acts := h.step(h.now)
	a := kinds(acts, Start)[0]
	h.m.Exited(a.Pod, a.Container, Termination{InstanceID: a.InstanceID, ExitCode: 128, Reason: "StartError",
		Message: "exec: no such file", FinishedAt: h.now})
	h.reconcile() // immediate first restart
	c := h.container("u", "c")
	h.m.Exited("u", "c", Termination{InstanceID: c.InstanceID, ExitCode: 128, Reason: "StartError", FinishedAt: h.now})
	h.reconcile()
	cs := h.status("u").ContainerStatuses[0]
	if cs.State.Waiting == nil || cs.State.Waiting.Reason != "CrashLoopBackOff" ||
		cs.LastTerminationState.Terminated.Reason != "StartError" {
		t.Fatalf("status = %+v", cs)
	}
}

func TestStaleObservationsAreIgnored(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	h.reconcile()
	old := h.container("u", "c").InstanceID
	h.exit("u", "c", 1) // restarted immediately as attempt 2
	if acts := h.m.Exited("u", "c", Termination{InstanceID: old, ExitCode: 1, FinishedAt: h.now}); acts != nil {
		t.Fatalf("exit of an old instance changed state: %+v", acts)
	}
	if c := h.container("u", "c"); c.Phase != Running || c.RestartCount != 1 {
		t.Fatalf("container = %+v", c)
	}
}

func TestRestoredRunningInstanceIsNotStartedAgain(t *testing.T) {
	h := newHarness(t)
	p := pod("p", "u", v1.RestartPolicyAlways, "c")
	in := newInstance(p, t0)
	in.Containers[0].RestartCount = 4
	h.m.Restore(in, t0)
	h.m.Adopted("u", "c", "u_c_7", 7, t0)
	h.m.SetDesired([]*v1.Pod{p})
	if acts := h.reconcile(); len(kinds(acts, Start)) != 0 {
		t.Fatalf("started a second copy of an adopted instance: %+v", acts)
	}
	h.exit("u", "c", 1)
	c := h.container("u", "c")
	if c.RestartCount != 5 || c.InstanceID != "u_c_8" {
		t.Fatalf("after adoption restart: %+v", c)
	}
}

func TestPhaseMixedContainers(t *testing.T) {
	h := newHarness(t)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyNever, "a", "b")})
	h.reconcile()
	h.exit("u", "a", 0)
	if ph := h.status("u").Phase; ph != v1.PodRunning {
		t.Fatalf("one running, one done: %s", ph)
	}
	h.exit("u", "b", 1)
	if ph := h.status("u").Phase; ph != v1.PodFailed {
		t.Fatalf("one failed under Never: %s", ph)
	}
}

func TestQOSClass(t *testing.T) {
	p := pod("p", "u", v1.RestartPolicyAlways, "c")
	if QOSClass(p) != v1.PodQOSBestEffort {
		t.Fatal("no resources must be BestEffort")
	}
	p.Spec.Containers[0].Resources.Limits = v1.ResourceList{
		v1.ResourceCPU: mustQ("100m"), v1.ResourceMemory: mustQ("64Mi")}
	if QOSClass(p) != v1.PodQOSGuaranteed {
		t.Fatal("limits only (requests default to limits) must be Guaranteed")
	}
	p.Spec.Containers[0].Resources.Requests = v1.ResourceList{v1.ResourceMemory: mustQ("32Mi")}
	if QOSClass(p) != v1.PodQOSBurstable {
		t.Fatal("requests below limits must be Burstable")
	}
}

func mustQ(s string) resource.Quantity { return resource.MustParse(s) }
