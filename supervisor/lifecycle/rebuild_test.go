package lifecycle

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// found is what the runtime holds of pod u after its record was lost: c
// crashed at attempt 2 and runs as attempt 3; the init container i ended.
func found() []Found {
	return []Found{
		{Container: "c", InstanceID: "u_c_3", Attempt: 3, Alive: true, StartedAt: t0.Add(-time.Minute)},
		{Container: "c", InstanceID: "u_c_2", Attempt: 2, StartedAt: t0.Add(-time.Hour),
			Exit: &Termination{InstanceID: "u_c_2", ExitCode: 1, Reason: "Error", StartedAt: t0.Add(-time.Hour), FinishedAt: t0.Add(-2 * time.Minute)}},
	}
}

func TestRebuiltInstanceIsAdoptedByItsDesiredPod(t *testing.T) {
	h := newHarness(t)
	h.m.Rebuild("u", "default", "p", "", found(), h.now)
	p := withInit(pod("p", "u", v1.RestartPolicyAlways, "c"), "i")
	p.Spec.Containers[0].ReadinessProbe = &v1.Probe{}
	h.m.SetDesired([]*v1.Pod{p})
	acts := h.reconcile()
	if s := kinds(acts, Start); len(s) != 0 {
		t.Fatalf("a rebuilt running container was started again: %+v", s)
	}
	if len(kinds(acts, Signal))+len(kinds(acts, Kill)) != 0 {
		t.Fatalf("a rebuilt running container was stopped: %+v", acts)
	}
	if pr := kinds(acts, Probe); len(pr) != 1 || pr[0].InstanceID != "u_c_3" {
		t.Fatalf("probes of the adopted container = %+v", pr)
	}
	st := h.status("u")
	cs := st.ContainerStatuses[0]
	if cs.State.Running == nil || cs.RestartCount != 2 || cs.Ready || cs.ContainerID != ContainerIDPrefix+"u_c_3" {
		t.Fatalf("container status = %+v", cs)
	}
	if lt := cs.LastTerminationState.Terminated; lt == nil || lt.ExitCode != 1 {
		t.Fatalf("lastState = %+v, want the exit of attempt 2", cs.LastTerminationState)
	}
	if st.StartTime == nil || !st.StartTime.Time.Equal(t0.Add(-time.Hour)) {
		t.Fatalf("startTime = %v, want the earliest start found", st.StartTime)
	}
	if ic := initStatus(st, "i"); ic.State.Terminated == nil || ic.State.Terminated.ExitCode != 0 {
		t.Fatalf("init container of a pod whose app ran: %+v", ic)
	}
	// It crashes again: the next attempt is 4, and it restarts.
	if s := kinds(h.exit("u", "c", 1), Start); len(s) != 1 || s[0].InstanceID != "u_c_4" {
		t.Fatalf("restart after the rebuild = %+v", s)
	}
	if got := h.container("u", "c").RestartCount; got != 3 {
		t.Fatalf("restartCount = %d, want 3", got)
	}
}

func TestRebuiltInstanceNoPodClaimsIsStopped(t *testing.T) {
	h := newHarness(t)
	h.m.Rebuild("u", "default", "p", "", found(), h.now)
	h.m.SetDesired([]*v1.Pod{pod("p", "other-uid", v1.RestartPolicyAlways, "c")})
	acts := h.reconcile()
	if len(kinds(acts, Signal)) != 1 || len(kinds(acts, Start)) != 0 {
		t.Fatalf("a superseded rebuilt instance must stop before its replacement starts: %+v", acts)
	}
}

func TestKeepRebuiltHoldsAnUnclaimedInstance(t *testing.T) {
	h := newHarness(t)
	h.m.Rebuild("u", "default", "p", "", found(), h.now)
	h.m.KeepRebuilt(h.now.Add(5 * time.Minute))
	if acts := h.reconcile(); len(kinds(acts, Signal)) != 0 {
		t.Fatalf("stopped while held: %+v", acts)
	}
	if wake := h.wake; !wake.Equal(h.now.Add(5 * time.Minute)) {
		t.Fatalf("next wake %v, want the end of the hold", wake)
	}
	if acts := h.advance(5 * time.Minute); len(kinds(acts, Signal)) != 1 {
		t.Fatalf("not stopped after the hold: %+v", acts)
	}
}

func TestRebuildTracksTheLiveInstanceAndNeverReusesAnAttempt(t *testing.T) {
	h := newHarness(t)
	fs := append(found(), Found{Container: "c", InstanceID: "u_c_4", Attempt: 4, StartedAt: t0,
		Exit: &Termination{InstanceID: "u_c_4", ExitCode: 128, Reason: "StartError", FinishedAt: t0}})
	h.m.Rebuild("u", "default", "p", "", fs, h.now)
	h.m.SetDesired([]*v1.Pod{pod("p", "u", v1.RestartPolicyAlways, "c")})
	if s := kinds(h.reconcile(), Start); len(s) != 0 {
		t.Fatalf("started beside the live instance: %+v", s)
	}
	if c := h.container("u", "c"); c.Phase != Running || c.InstanceID != "u_c_3" {
		t.Fatalf("current = %+v, want the live u_c_3", c)
	}
	if s := kinds(h.exit("u", "c", 1), Start); len(s) != 1 || s[0].InstanceID != "u_c_5" {
		t.Fatalf("next start = %+v, want attempt 5", s)
	}
}
