package conformance

// test/e2e_node/container_lifecycle_test.go's restartable init container
// (sidecar) tests: start order, restarts, failures, startup and liveness
// probes. Upstream's ginkgo.Ordered groups (one pod, several Its reading
// its log) are one Go test each, named after the group, with each It's
// assertion marked by its quoted name; groups run for each restartPolicy
// upstream runs them for, as subtests.

import (
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// onBothPolicies runs f on both runtimes for each restart policy.
func onBothPolicies(t *testing.T, policies []v1.RestartPolicy, f func(t *testing.T, e *env, policy v1.RestartPolicy)) {
	t.Parallel()
	for _, policy := range policies {
		t.Run(string(policy), func(t *testing.T) {
			onBoth(t, func(t *testing.T, e *env) { f(t, e, policy) })
		})
	}
}

// podName is name with the policy appended, so the variants of one
// upstream pod can run at once.
func podName(name string, policy v1.RestartPolicy) string {
	return name + "-" + strings.ToLower(string(policy))
}

var allPolicies = []v1.RestartPolicy{v1.RestartPolicyNever, v1.RestartPolicyOnFailure, v1.RestartPolicyAlways}

// "should launch restartable init containers before the regular container"
// (an earlier upstream version of the next test, kept under its name)
func TestContainersLifecycle_shouldLaunchRestartableInitContainersBeforeTheRegularContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable-init-containers-start-before-regular"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			InitContainers: []v1.Container{l.gated(restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 600}))),
				l.gated(restartable("restartable-init-2", l.execCommand("restartable-init-2", execCmd{Delay: 600})))},
			Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 600}))}}}
		l.create(p)
		e.waitPod(p.Name, statusTimeout, "regular-1 running", func(p *v1.Pod) bool { return statusNamed(p, "regular-1").State.Running != nil })
		o := l.read(p.Name, "regular-1 Started")
		must(t, o.StartsBefore("restartable-init-1", "restartable-init-2"))
		must(t, o.StartsBefore("restartable-init-2", "regular-1"))
	})
}

// "using a Pod with restartPolicy=Never, three init container and two
// restartable init containers" (Ordered): "should finish and produce
// log" and the order Its below.
func TestContainersLifecycle_usingAPodWithRestartPolicyNeverThreeInitContainerAndTwoRestartableInitContainers(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable-init-containers-start-serially"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1})),
				l.gated(restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 600}))),
				ctr("init-2", l.execCommand("init-2", execCmd{Delay: 1})),
				l.gated(restartable("restartable-init-2", l.execCommand("restartable-init-2", execCmd{Delay: 600}))),
				ctr("init-3", l.execCommand("init-3", execCmd{Delay: 1}))},
			Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
		l.create(p)
		// "should finish and produce log": the pod exits successfully
		if got := e.waitNoLongerRunning(p.Name, lifecycleTimeout); got.Status.Phase != v1.PodSucceeded {
			t.Fatalf("phase %s, want Succeeded: %s", got.Status.Phase, describe(got))
		}
		o := l.read(p.Name, "regular-1 Exiting")
		// "should run the first init container to completion before starting first restartable init container"
		must(t, o.StartsBefore("init-1", "restartable-init-1"))
		must(t, o.ExitsBefore("init-1", "restartable-init-1"))
		// "should run first init container and first restartable init container together"
		must(t, o.RunTogetherLhsFirst("restartable-init-1", "init-2"))
		// "should run second init container to completion before starting second restartable init container"
		must(t, o.StartsBefore("init-2", "restartable-init-2"))
		must(t, o.ExitsBefore("init-2", "restartable-init-2"))
		// "should start second restartable init container before third init container"
		must(t, o.StartsBefore("restartable-init-2", "init-3"))
		// "should run both restartable init containers and third init container together"
		must(t, o.RunTogether("restartable-init-1", "restartable-init-2"))
		must(t, o.RunTogether("restartable-init-1", "init-3"))
		must(t, o.RunTogether("restartable-init-2", "init-3"))
		// "should run third init container to completion before starting regular container"
		must(t, o.StartsBefore("init-3", "regular-1"))
		must(t, o.ExitsBefore("init-3", "regular-1"))
		// "should run both restartable init containers and a regular container together"
		must(t, o.RunTogether("restartable-init-1", "regular-1"))
		must(t, o.RunTogether("restartable-init-2", "regular-1"))
	})
}

// "using a restartable init container in a Pod with restartPolicy=
// Never/OnFailure/Always: a restartable init container runs continuously"
// (Ordered). Never, OnFailure: "should complete a Pod successfully and
// produce log", "should not restart a restartable init container",
// "should run a regular container to completion". Always: "should keep
// running a Pod continuously and produce log", "should not restart a
// restartable init container", "should start a regular container".
func TestContainersLifecycle_aRestartableInitContainerRunsContinuously(t *testing.T) {
	onBothPolicies(t, allPolicies, func(t *testing.T, e *env, policy v1.RestartPolicy) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName("restartable-init-container-run-continuously", policy)}, Spec: v1.PodSpec{RestartPolicy: policy,
			InitContainers: []v1.Container{restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 600}))},
			Containers:     []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
		l.create(p)
		if policy == v1.RestartPolicyAlways {
			e.waitRestartCount(p.Name, false, 0, 2)
		} else if got := e.waitNoLongerRunning(p.Name, lifecycleTimeout); got.Status.Phase != v1.PodSucceeded {
			t.Fatalf("phase %s, want Succeeded: %s", got.Status.Phase, describe(got))
		}
		o := l.read(p.Name, "regular-1 Exiting")
		must(t, o.HasNotRestarted("restartable-init-1"))
		if policy == v1.RestartPolicyAlways {
			must(t, o.HasRestarted("regular-1"))
		} else {
			must(t, o.Exits("regular-1"))
		}
	})
}

// "... a restartable init container fails to start because of a bad
// image" (Ordered): "should mark a Pod as failed and produce log" (Always:
// "should continuously run Pod keeping it Pending and produce log"; its
// pod is restartPolicy Never upstream too), "should not start a
// restartable init container", "should not start a regular container".
// containerd only: process pods have no image.
func TestContainersLifecycle_aRestartableInitContainerFailsToStartBecauseOfABadImage(t *testing.T) {
	t.Parallel()
	for _, policy := range allPolicies {
		t.Run(string(policy), func(t *testing.T) {
			onContainerd(t, func(t *testing.T, e *env) {
				l := e.newOrderLog()
				side := restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 600}))
				side.Image = badImage
				specPolicy := policy
				if policy == v1.RestartPolicyAlways {
					specPolicy = v1.RestartPolicyNever // as upstream
				}
				p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName("restartable-init-runs-with-pod", policy)}, Spec: v1.PodSpec{RestartPolicy: specPolicy,
					InitContainers: []v1.Container{side},
					Containers:     []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
				l.create(p)
				e.waitInitWaiting(p.Name, 0, "ImagePullBackOff")
				o := l.read(p.Name, "")
				must(t, o.DoesntStart("restartable-init-1"))
				must(t, o.DoesntStart("regular-1"))
			})
		})
	}
}

// "... a restartable init container starts and exits with exit code 0
// continuously" and "... with exit code 1 continuously" (Ordered): Never,
// OnFailure: "should complete a Pod successfully and produce log"; Always:
// "should keep running a Pod continuously and produce log"; then "should
// restart a restartable init container before the regular container
// started", "should restart a restartable init container after the
// regular container started", "should run a regular container to
// completion" (Always: "should start a regular container"). regular-1
// runs 15 s, not 60.
func TestContainersLifecycle_aRestartableInitContainerStartsAndExitsContinuously(t *testing.T) {
	t.Parallel()
	for _, code := range []int{0, 1} {
		t.Run(map[int]string{0: "exitCode0", 1: "exitCode1"}[code], func(t *testing.T) {
			onBothPolicies(t, allPolicies, func(t *testing.T, e *env, policy v1.RestartPolicy) {
				l := e.newOrderLog()
				name := podName(map[int]string{0: "restartable-init-container-exit-0-continuously", 1: "restartable-init-container-exit-1-continuously"}[code], policy)
				p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{RestartPolicy: policy,
					InitContainers: []v1.Container{restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 5, ExitCode: code})),
						ctr("init-1", l.execCommand("init-1", execCmd{Delay: 5}))},
					Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 15}))}}}
				l.create(p)
				if policy == v1.RestartPolicyAlways {
					e.waitRestartCount(p.Name, false, 0, 1)
				} else if got := e.waitNoLongerRunning(p.Name, lifecycleTimeout); got.Status.Phase != v1.PodSucceeded {
					t.Fatalf("phase %s, want Succeeded: %s", got.Status.Phase, describe(got))
				}
				o := l.read(p.Name, "regular-1 Exiting")
				must(t, o.StartsBefore("restartable-init-1", "regular-1"))
				must(t, o.StartsBefore("regular-1", "restartable-init-1"))
				if policy == v1.RestartPolicyAlways {
					must(t, o.Starts("regular-1"))
				} else {
					must(t, o.Exits("regular-1"))
				}
			})
		})
	}
}

// "... an Init container before restartable init container fails"
// (Never) and "... continuously fails" (OnFailure, Always), Ordered:
// Never: "should mark a Pod as failed and produce log", "should mark an
// Init container as failed", "should not start restartable init
// container". OnFailure, Always: "should continuously run Pod keeping it
// Pending", "should have Init container restartCount greater than 0",
// "should not start restartable init container".
func TestContainersLifecycle_anInitContainerBeforeRestartableInitContainerFails(t *testing.T) {
	onBothPolicies(t, allPolicies, func(t *testing.T, e *env, policy v1.RestartPolicy) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName("init-container-fails-before-restartable-init-starts", policy)}, Spec: v1.PodSpec{RestartPolicy: policy,
			InitContainers: []v1.Container{ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1, ExitCode: 1})),
				restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 600}))},
			Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 600}))}}}
		l.create(p)
		if policy == v1.RestartPolicyNever {
			e.waitPod(p.Name, lifecycleTimeout, "the pod Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
			o := l.read(p.Name, "init-1 Exiting")
			must(t, o.Exits("init-1"))
			must(t, o.DoesntStart("restartable-init-1"))
			return
		}
		e.waitPendingRestarts(p.Name, 3)
		o := l.read(p.Name, "")
		must(t, o.HasRestarted("init-1"))
		must(t, o.DoesntStart("restartable-init-1"))
	})
}

// waitPendingRestarts is upstream's "pending and restarting 3 times": the
// first init container restarted n times while the pod stays Pending.
func (e *env) waitPendingRestarts(name string, n int32) {
	e.t.Helper()
	got := e.waitPod(name, lifecycleTimeout, "the first init container restarted enough, or the pod not Pending", func(p *v1.Pod) bool {
		return p.Status.Phase != v1.PodPending || (len(p.Status.InitContainerStatuses) > 0 && p.Status.InitContainerStatuses[0].RestartCount >= n)
	})
	if got.Status.Phase != v1.PodPending {
		e.t.Fatalf("pod should be in pending phase: %s", describe(got))
	}
}

// "... an Init container after restartable init container fails"
// (Ordered): Never: "should mark a Pod as failed and produce log",
// "should mark an Init container as failed", "should be running
// restartable init container and a failed Init container in parallel".
// OnFailure, Always: "should continuously run Pod keeping it Pending",
// "should have Init container restartCount greater than 0", "should be
// running restartable init container and a failed Init container in
// parallel". The sidecar runs 15 s (upstream 5 s): on containerd, with a
// dozen pods starting at once on 2 cores, init-1's create took 6 s once,
// and the two never overlapped in the first run the check reads.
func TestContainersLifecycle_anInitContainerAfterRestartableInitContainerFails(t *testing.T) {
	onBothPolicies(t, allPolicies, func(t *testing.T, e *env, policy v1.RestartPolicy) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: podName("restartable-init-container-fails-before-init-container", policy)}, Spec: v1.PodSpec{RestartPolicy: policy,
			InitContainers: []v1.Container{restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 15, ExitCode: 1})),
				ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1, ExitCode: 1}))},
			Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 600}))}}}
		l.create(p)
		if policy == v1.RestartPolicyNever {
			e.waitPod(p.Name, lifecycleTimeout, "the pod Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
			o := l.read(p.Name, "restartable-init-1 Exiting")
			must(t, o.Exits("init-1"))
			must(t, o.RunTogether("restartable-init-1", "init-1"))
			return
		}
		e.waitPendingRestarts(p.Name, 3)
		o := l.read(p.Name, "")
		must(t, o.HasRestarted("init-1"))
		must(t, o.RunTogether("restartable-init-1", "init-1"))
	})
}

// "running restartable init containers with startup probes: should launch
// restartable init containers serially considering the startup probe".
// Each sidecar takes 3 s (upstream 10 s) to create its started file; the
// probes' period is 1 s (upstream's default 10 s).
func TestContainersLifecycle_shouldLaunchRestartableInitContainersSeriallyConsideringTheStartupProbe(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		side := func(name string) v1.Container {
			c := restartable(name, l.execCommand(name, execCmd{StartDelay: 3, Delay: 600}))
			c.StartupProbe = &v1.Probe{ProbeHandler: execProbeCmd("test", "-f", l.startedFile(name)), PeriodSeconds: 1, FailureThreshold: 30}
			return c
		}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable-init-containers-start-serially-startup"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{side("restartable-init-1"), side("restartable-init-2")},
			Containers:     []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "regular-1 Exiting")
		must(t, o.StartsBefore("restartable-init-1", "restartable-init-2"))
		must(t, o.StartsBefore("restartable-init-2", "regular-1"))
	})
}

// sidecarWithPreStop is upstream's restartable-init-1 of the "using a
// PreStop hook" tests: runs long, takes TerminationSeconds (15 s upstream,
// 2 s here) to exit on SIGTERM, and its preStop logs.
func sidecarWithPreStop(l orderLog) v1.Container {
	c := restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 600, TerminationSeconds: 2}))
	c.Lifecycle = &v1.Lifecycle{PreStop: execHandler(l.execCommand("PreStop-restartable-init-1", execCmd{Delay: 1}))}
	return c
}

// "... using a PreStop hook: should call the container's preStop hook and
// not launch next container if the restartable init container's startup
// probe fails"
func TestContainersLifecycle_shouldCallTheContainersPreStopHookAndNotLaunchNextContainerIfTheRestartableInitContainersStartupProbeFails(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		side := sidecarWithPreStop(l)
		side.StartupProbe = &v1.Probe{ProbeHandler: execProbeCmd("sh", "-c", "exit 1"), InitialDelaySeconds: 5, FailureThreshold: 1}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable-init-container-failed-startup"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways,
			InitContainers: []v1.Container{side},
			Containers:     []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
		l.create(p)
		got := e.waitRestartCount(p.Name, true, 0, 2)
		if got.Status.Phase != v1.PodPending {
			t.Fatalf("pod %q is not pending: %s", p.Name, describe(got))
		}
		o := l.read(p.Name, "restartable-init-1 Exiting")
		must(t, o.RunTogether("restartable-init-1", "PreStop-restartable-init-1"))
		must(t, o.Starts("PreStop-restartable-init-1"))
		must(t, o.Exits("restartable-init-1"))
		must(t, o.DoesntStart("regular-1"))
	})
}

// "running restartable init containers with liveness probes: should call
// the container's preStop hook and start the next container if the
// restartable init container's liveness probe fails"
func TestContainersLifecycle_shouldCallTheContainersPreStopHookAndStartTheNextContainerIfTheRestartableInitContainersLivenessProbeFails(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		side := sidecarWithPreStop(l)
		side.LivenessProbe = &v1.Probe{ProbeHandler: execProbeCmd("sh", "-c", "exit 1"), InitialDelaySeconds: 5, FailureThreshold: 1}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable-init-container-failed-liveness"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways,
			InitContainers: []v1.Container{side},
			Containers:     []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
		l.create(p)
		e.waitRestartCount(p.Name, true, 0, 2)
		e.waitRestartCount(p.Name, false, 0, 1)
		o := l.read(p.Name, "restartable-init-1 Exiting")
		must(t, o.RunTogether("restartable-init-1", "PreStop-restartable-init-1"))
		must(t, o.Starts("PreStop-restartable-init-1"))
		must(t, o.Exits("restartable-init-1"))
		must(t, o.Starts("regular-1"))
	})
}

// "A restartable init container with startup probe fails initially:
// should continue probing and allow regular container to start after the
// restartable init container recovers"
func TestContainersLifecycle_shouldContinueProbingAndAllowRegularContainerToStartAfterTheRestartableInitContainerRecovers(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		side := restartable("buggy-restartable-init", []string{"sh", "-c", `
if [ ! -f ` + l.dir + `/first_run_done ]; then
  echo 'First run: creating marker and exiting with 1'
  touch ` + l.dir + `/first_run_done
  exit 1
else
  echo 'Second run: marker found, running as sidecar'
  sleep 120
fi`})
		side.StartupProbe = &v1.Probe{ProbeHandler: execProbeCmd("/bin/true"), InitialDelaySeconds: 3, PeriodSeconds: 2, FailureThreshold: 10}
		regular := ctr("regular-container", pauseCommand)
		regular.StartupProbe = &v1.Probe{ProbeHandler: execProbeCmd("/bin/true"), InitialDelaySeconds: 5, PeriodSeconds: 5}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable-init-startup-probe-fix"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(2)),
			InitContainers:                []v1.Container{side}, Containers: []v1.Container{regular}}}
		l.create(p)
		e.waitPod(p.Name, lifecycleTimeout, "restartable init restarted", func(p *v1.Pod) bool {
			return statusNamed(p, "buggy-restartable-init").RestartCount > 0
		})
		e.waitPod(p.Name, lifecycleTimeout, "restartable init running", func(p *v1.Pod) bool {
			return statusNamed(p, "buggy-restartable-init").State.Running != nil
		})
		e.waitPod(p.Name, lifecycleTimeout, "regular container running", func(p *v1.Pod) bool {
			return statusNamed(p, "regular-container").State.Running != nil
		})
	})
}

func statusNamed(p *v1.Pod, name string) v1.ContainerStatus {
	for _, s := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		if s.Name == name {
			return s
		}
	}
	return v1.ContainerStatus{}
}
