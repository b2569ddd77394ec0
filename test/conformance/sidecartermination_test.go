package conformance

// test/e2e_node/container_lifecycle_test.go's "A pod with restartable init
// containers is terminating" tests.

import (
	"context"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// termination is a container's expected end.
type termination struct {
	exitCode int32
	reason   string
}

// expectTerminated is upstream's expectPodTerminationContainerStatuses.
func expectTerminated(t *testing.T, statuses []v1.ContainerStatus, want map[string]termination) {
	t.Helper()
	if len(statuses) != len(want) {
		t.Errorf("%d container statuses, want %d", len(statuses), len(want))
	}
	for _, s := range statuses {
		w, ok := want[s.Name]
		switch {
		case !ok:
			t.Errorf("container %q not expected", s.Name)
		case s.State.Terminated == nil:
			t.Errorf("container %q not terminated: %+v", s.Name, s.State)
		case s.State.Terminated.ExitCode != w.exitCode || s.State.Terminated.Reason != w.reason:
			t.Errorf("container %q terminated with %d %s, want %d %s", s.Name, s.State.Terminated.ExitCode, s.State.Terminated.Reason, w.exitCode, w.reason)
		}
	}
}

// sidecarsThenRegular is upstream's "serialize-termination" pod: three
// sidecars that take 5 s to exit on SIGTERM, then regular-1 running 5 s.
func sidecarsThenRegular(l orderLog, name string, lifecycle func(string) *v1.Lifecycle) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
		Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 5}))}}}
	for _, n := range []string{"restartable-init-1", "restartable-init-2", "restartable-init-3"} {
		c := l.gated(restartable(n, l.execCommand(n, execCmd{Delay: 60, TerminationSeconds: 5})))
		if lifecycle != nil {
			c.Lifecycle = lifecycle(n)
		}
		p.Spec.InitContainers = append(p.Spec.InitContainers, c)
	}
	return p
}

func assertSidecarsStartedInOrder(t *testing.T, o outputList) {
	t.Helper()
	must(t, o.StartsBefore("restartable-init-1", "restartable-init-2"))
	must(t, o.StartsBefore("restartable-init-1", "restartable-init-3"))
	must(t, o.StartsBefore("restartable-init-2", "restartable-init-3"))
	must(t, o.StartsBefore("restartable-init-1", "regular-1"))
	must(t, o.StartsBefore("restartable-init-2", "regular-1"))
	must(t, o.StartsBefore("restartable-init-3", "regular-1"))
}

func assertSidecarsExitedInReverseOrder(t *testing.T, o outputList) {
	t.Helper()
	// main containers exit first
	must(t, o.ExitsBefore("regular-1", "restartable-init-1"))
	must(t, o.ExitsBefore("regular-1", "restartable-init-2"))
	must(t, o.ExitsBefore("regular-1", "restartable-init-3"))
	// followed by sidecars in reverse order
	must(t, o.ExitsBefore("restartable-init-3", "restartable-init-2"))
	must(t, o.ExitsBefore("restartable-init-2", "restartable-init-1"))
}

var sidecarsCompleted = map[string]termination{
	"restartable-init-1": {0, "Completed"},
	"restartable-init-2": {0, "Completed"},
	"restartable-init-3": {0, "Completed"},
}

// "The containers exit successfully: should terminate sidecars in reverse
// order after all main containers have exited"
func TestContainersLifecycle_shouldTerminateSidecarsInReverseOrderAfterAllMainContainersHaveExited(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := sidecarsThenRegular(l, "serialize-termination", nil)
		l.create(p)
		got := e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		expectTerminated(t, got.Status.InitContainerStatuses, sidecarsCompleted)
		o := l.read(p.Name, "restartable-init-1 Exiting")
		assertSidecarsStartedInOrder(t, o)
		assertSidecarsExitedInReverseOrder(t, o)
	})
}

// "The PreStop hooks don't exit: should terminate sidecars simultaneously
// if prestop doesn't exit". The hooks loop every 0.2 s until killed with
// their containers: all at the grace deadline (30 s) plus the 2 s minimum
// grace, counted from the pod's termination, which begins once regular-1
// has exited. Upstream measures each hook's life from its own first line
// (32 s ± 1 s); that line comes after a runc exec, which takes up to 2.5
// s on 2 busy cores, so here the kill is bounded on both sides by what
// does not move with it: no sooner than 32 s after regular-1's last line
// (its last loop less than 1 s before), no later than 33.5 s after the
// hook's own first.
func TestContainersLifecycle_shouldTerminateSidecarsSimultaneouslyIfPrestopDoesntExit(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := sidecarsThenRegular(l, "serialize-termination-prestop-loops", func(n string) *v1.Lifecycle {
			return &v1.Lifecycle{PreStop: execHandler(l.execCommand(prefixed("PreStop", n), execCmd{LoopForever: true, LoopPeriod: "0.2"}))}
		})
		l.create(p)
		got := e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		// all restartable init containers are sigkilled with exit code 137
		expectTerminated(t, got.Status.InitContainerStatuses, map[string]termination{
			"restartable-init-1": {137, "Error"},
			"restartable-init-2": {137, "Error"},
			"restartable-init-3": {137, "Error"},
		})
		o := l.read(p.Name, "regular-1 Exiting")
		assertSidecarsStartedInOrder(t, o)
		mainExit, err := o.TimeOfExit("regular-1")
		must(t, err)
		var lasts []time.Duration
		for _, n := range []string{"restartable-init-1", "restartable-init-2", "restartable-init-3"} {
			start, err := o.TimeOfStart(prefixed("PreStop", n))
			must(t, err)
			last, err := o.TimeOfLastLoop(prefixed("PreStop", n))
			must(t, err)
			lasts = append(lasts, last)
			// 30 seconds + 2 second minimum grace for the SIGKILL; the
			// last loop is a period (0.2 s) before the kill, 1 s allowed
			// for a busy machine's scheduling
			if sinceMain := last - mainExit; sinceMain < 31*time.Second {
				t.Errorf("PreStop-%s was killed %v after regular-1 exited, want 32s or more:\n%v", n, sinceMain, o)
			}
			if life := last - start; life > 33500*time.Millisecond {
				t.Errorf("PreStop-%s lived %v, want ~32s:\n%v", n, life, o)
			}
		}
		// should all end together since they loop infinitely and exceed their grace period
		if spread := maxDur(lasts) - minDur(lasts); spread > time.Second {
			t.Errorf("the preStop hooks were killed %v apart, want at the same time:\n%v", spread, o)
		}
	})
}

// "the restartable init containers have multiple PreStop hooks: should
// call sidecar container PreStop hook simultaneously". Upstream wants the
// three hooks' first lines within 0.5 s; each comes after a runc exec,
// which takes up to 2.5 s on 2 busy cores, so here each hook (5 s long,
// past that spread) must start before any hook has ended: they ran at
// once, none waited for another. The spread of their starts is logged.
func TestContainersLifecycle_shouldCallSidecarContainerPreStopHookSimultaneously(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := sidecarsThenRegular(l, "serialize-termination-simul-prestop", func(n string) *v1.Lifecycle {
			return &v1.Lifecycle{PreStop: execHandler(l.execCommand(prefixed("PreStop", n), execCmd{Delay: 5}))}
		})
		l.create(p)
		got := e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		expectTerminated(t, got.Status.InitContainerStatuses, sidecarsCompleted)
		o := l.read(p.Name, "restartable-init-1 Exiting")
		assertSidecarsStartedInOrder(t, o)
		assertSidecarsExitedInReverseOrder(t, o)
		// and the pre-stop hooks should have been called simultaneously
		var starts, exits []time.Duration
		for _, n := range []string{"restartable-init-1", "restartable-init-2", "restartable-init-3"} {
			start, err := o.TimeOfStart(prefixed("PreStop", n))
			must(t, err)
			exit, err := o.TimeOfExit(prefixed("PreStop", n))
			must(t, err)
			starts, exits = append(starts, start), append(exits, exit)
		}
		if maxDur(starts) > minDur(exits) {
			t.Errorf("a preStop hook started after another had ended, want them all at once:\n%v", o)
		}
		t.Logf("the preStop hooks started %v apart", maxDur(starts)-minDur(starts))
	})
}

// "Restartable init containers are terminated during initialization:
// should not hang in termination if terminated during initialization".
// The delete with grace 3 s is the manifest's removal and the API's
// delete with that grace.
func TestContainersLifecycle_shouldNotHangInTerminationIfTerminatedDuringInitialization(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := sidecarsThenRegular(l, "dont-hang-if-terminated-in-init", func(n string) *v1.Lifecycle {
			return &v1.Lifecycle{PreStop: execHandler(l.execCommand(prefixed("PreStop", n), execCmd{Delay: 1}))}
		})
		p.Spec.InitContainers = append([]v1.Container{ctr("start-init", l.execCommand("start-init", execCmd{Delay: 300}))}, p.Spec.InitContainers...)
		l.create(p)
		got := e.waitPod(p.Name, lifecycleTimeout, "pod pending and init running", func(p *v1.Pod) bool {
			s := p.Status.InitContainerStatuses
			return p.Status.Phase != v1.PodPending || (len(s) > 0 && s[0].Started != nil && *s[0].Started && s[0].State.Running != nil)
		})
		if got.Status.Phase != v1.PodPending {
			t.Fatalf("pod should be in pending phase: %s", describe(got))
		}
		l.read(p.Name, "start-init Starting") // it handles SIGTERM from here
		// the init container is running, so we stop the pod before the sidecars even start
		const grace, buffer = 3, 3
		if d := e.timeToGone(p.Name, ptr(int64(grace))); d > (grace+buffer)*time.Second {
			t.Errorf("should delete in < %ds, took %v", grace+buffer, d)
		}
	})
}

// "there is a non-started restartable init container: should terminate
// restartable init containers gracefully if there is a non-started
// restartable init container". Grace 180 s; the pod must be gone within
// 1 s + 60 s.
func TestContainersLifecycle_shouldTerminateRestartableInitContainersGracefullyIfThereIsANonStartedRestartableInitContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		notStarted := restartable("restartable-init-2", l.execCommand("restartable-init-2", execCmd{Delay: 600, TerminationSeconds: 1}))
		notStarted.StartupProbe = &v1.Probe{ProbeHandler: execProbeCmd("false"), FailureThreshold: 600}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "terminate-restartable-init-gracefully"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(180)),
			InitContainers: []v1.Container{ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1, TerminationSeconds: 5})), notStarted,
				restartable("restartable-init-3", l.execCommand("restartable-init-3", execCmd{Delay: 600, TerminationSeconds: 1}))},
			Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 600, TerminationSeconds: 1}))}}}
		l.create(p)
		got := e.waitPod(p.Name, lifecycleTimeout, "the second init container is running but not started", func(p *v1.Pod) bool {
			s := p.Status.InitContainerStatuses
			return p.Status.Phase != v1.PodPending || (len(s) == 3 && s[1].State.Running != nil && (s[1].Started == nil || !*s[1].Started))
		})
		if got.Status.Phase != v1.PodPending {
			t.Fatalf("pod should be in pending phase: %s", describe(got))
		}
		// Its shell handles SIGTERM once it logged (as PID 1 it would
		// ignore an earlier one, as under the kubelet).
		l.read(p.Name, "restartable-init-2 Starting")
		if err := removeManifest(e, p.Name); err != nil {
			t.Fatal(err)
		}
		e.waitRemovalSeen(p.Name)
		if _, err := e.n.client.Delete(context.Background(), "default", p.Name, ptr(int64(180)), false); err != nil {
			t.Fatalf("deleting pod %s: %v", p.Name, err)
		}
		e.waitGone(p.Name, 61*time.Second)
	})
}

func maxDur(ds []time.Duration) time.Duration {
	var m time.Duration
	for _, d := range ds {
		m = max(m, d)
	}
	return m
}

func minDur(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	m := ds[0]
	for _, d := range ds {
		m = min(m, d)
	}
	return m
}
