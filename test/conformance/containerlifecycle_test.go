package conformance

// test/e2e_node/container_lifecycle_test.go's "[NodeConformance]
// Containers Lifecycle" tests with regular and init containers: their
// order, hooks, probes and termination, read from the shared log
// lifecyclelog_test.go describes. The restartable init (sidecar) tests
// are in sidecar_test.go and sidecartermination_test.go; README.md lists
// the ones that do not apply.

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// lifecycleTimeout bounds upstream's "wait for the pod to finish" (1–5
// minutes upstream; the pods here finish in well under one).
const lifecycleTimeout = 2 * time.Minute

// ctr is a container running command.
func ctr(name string, command []string) v1.Container {
	return v1.Container{Name: name, Command: command}
}

// restartable is a restartable init (sidecar) container running command.
func restartable(name string, command []string) v1.Container {
	return v1.Container{Name: name, Command: command, RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)}
}

func execHandler(command []string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: command}}
}

func execProbeCmd(command ...string) v1.ProbeHandler {
	return v1.ProbeHandler{Exec: &v1.ExecAction{Command: command}}
}

// waitRestartCount is upstream's WaitForPodContainerRestartCount (init:
// WaitForPodInitContainerRestartCount): the container at index has
// restarted at least n times.
func (e *env) waitRestartCount(name string, init bool, index int, n int32) *v1.Pod {
	e.t.Helper()
	what := "app"
	if init {
		what = "init"
	}
	return e.waitPod(name, lifecycleTimeout, what+" container restarted enough", func(p *v1.Pod) bool {
		statuses := p.Status.ContainerStatuses
		if init {
			statuses = p.Status.InitContainerStatuses
		}
		return len(statuses) > index && statuses[index].RestartCount >= n
	})
}

// "should launch init container serially before a regular container"
func TestContainersLifecycle_shouldLaunchInitContainerSeriallyBeforeARegularContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		regular := ctr("regular-1", l.execCommand("regular-1", execCmd{StartDelay: 5, Delay: 1}))
		regular.StartupProbe = &v1.Probe{ProbeHandler: execProbeCmd("test", "-f", l.startedFile("regular-1")), PeriodSeconds: 1}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "initcontainer-test-pod"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1})),
				ctr("init-2", l.execCommand("init-2", execCmd{Delay: 1})), ctr("init-3", l.execCommand("init-3", execCmd{Delay: 1}))},
			Containers: []v1.Container{regular}}}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "regular-1 Exiting")
		must(t, o.StartsBefore("init-1", "init-2"))
		must(t, o.ExitsBefore("init-1", "init-2"))
		must(t, o.StartsBefore("init-2", "init-3"))
		must(t, o.ExitsBefore("init-2", "init-3"))
		must(t, o.StartsBefore("init-3", "regular-1"))
		must(t, o.ExitsBefore("init-3", "regular-1"))
	})
}

// "should not launch regular containers if an init container fails"
func TestContainersLifecycle_shouldNotLaunchRegularContainersIfAnInitContainerFails(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "initcontainer-test-pod-failure"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1, ExitCode: 1}))},
			Containers:     []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
		l.create(p)
		e.waitPod(p.Name, lifecycleTimeout, "the pod Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		o := l.read(p.Name, "init-1 Exiting")
		must(t, o.Starts("init-1"))
		must(t, o.Exits("init-1"))
		must(t, o.DoesntStart("regular-1"))
	})
}

// "should run Init container to completion before call to PostStart of regular container"
func TestContainersLifecycle_shouldRunInitContainerToCompletionBeforeCallToPostStartOfRegularContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		regular := ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 10}))
		regular.Lifecycle = &v1.Lifecycle{PostStart: execHandler(l.execCommand("PostStart-regular-1", execCmd{Delay: 1}))}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "initcontainer-test-pod-with-post-start"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1}))},
			Containers:     []v1.Container{regular}}}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "regular-1 Exiting")
		must(t, o.StartsBefore("init-1", "PostStart-regular-1"))
		must(t, o.ExitsBefore("init-1", "PostStart-regular-1"))
		must(t, o.RunTogether("regular-1", "PostStart-regular-1"))
	})
}

// "should restart failing container when pod restartPolicy is Always"
func TestContainersLifecycle_shouldRestartFailingContainerWhenPodRestartPolicyIsAlways(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "container-must-be-restarted"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways,
			Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1, ExitCode: 1}))}}}
		l.create(p)
		e.waitRestartCount(p.Name, false, 0, 3)
		o := l.read(p.Name, "")
		must(t, o.Starts("regular-1"))
		must(t, o.StartsBefore("regular-1", "regular-1"))
		must(t, o.ExitsBefore("regular-1", "regular-1"))
	})
}

// "should not launch second container before PostStart of the first container completed"
func TestContainersLifecycle_shouldNotLaunchSecondContainerBeforePostStartOfTheFirstContainerCompleted(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		first := ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 10}))
		first.Lifecycle = &v1.Lifecycle{PostStart: execHandler(l.execCommand("PostStart-regular-1", execCmd{Delay: 1}))}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "post-start-blocks-second-container"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			Containers: []v1.Container{first, ctr("regular-2", l.execCommand("regular-2", execCmd{Delay: 1}))}}}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "regular-1 Exiting")
		must(t, o.StartsBefore("PostStart-regular-1", "regular-2"))
		must(t, o.ExitsBefore("PostStart-regular-1", "regular-2"))
	})
}

// "have init container in a Pod with restartPolicy=Never / an init
// container fails to start because of a bad image": "should mark a Pod as
// failed and produce log", "should not start an init container", "should
// not start a regular container". containerd only: process pods have no
// image. The registry is 127.0.0.1:1 (refused at once).
func TestContainersLifecycle_anInitContainerFailsToStartBecauseOfABadImage(t *testing.T) {
	onContainerd(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		init := ctr("init1-1", l.execCommand("init1-1", execCmd{Delay: 600}))
		init.Image = badImage
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "bad-image"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{init},
			Containers:     []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 1}))}}}
		l.create(p)
		e.waitInitWaiting(p.Name, 0, "ImagePullBackOff")
		o := l.read(p.Name, "")
		must(t, o.DoesntStart("init1-1"))
		must(t, o.DoesntStart("regular-1"))
	})
}

// badImage is upstream's InvalidRegistryImage on a registry that refuses
// at once.
const badImage = "127.0.0.1:1/invalid/image:1"

// waitInitWaiting is upstream's WaitForPodInitContainerToFail: the init
// container at index waits with reason.
func (e *env) waitInitWaiting(name string, index int, reason string) {
	e.t.Helper()
	e.waitPod(name, lifecycleTimeout, "init container waiting with "+reason, func(p *v1.Pod) bool {
		s := p.Status.InitContainerStatuses
		return len(s) > index && s[index].State.Waiting != nil && s[index].State.Waiting.Reason == reason
	})
}

// "shouldn't restart init containers upon regular container restart".
// regular-1 runs 2 s, not 10, before it fails.
func TestContainersLifecycle_shouldntRestartInitContainersUponRegularContainerRestart(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "initcontainer-test-pod-restart"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyAlways,
			InitContainers: []v1.Container{ctr("init-1", l.execCommand("init-1", execCmd{Delay: 1})),
				ctr("init-2", l.execCommand("init-2", execCmd{Delay: 1})), ctr("init-3", l.execCommand("init-3", execCmd{Delay: 1}))},
			Containers: []v1.Container{ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 2, ExitCode: -1}))}}}
		l.create(p)
		e.waitRestartCount(p.Name, false, 0, 3)
		o := l.read(p.Name, "")
		must(t, o.StartsBefore("init-1", "init-2"))
		must(t, o.ExitsBefore("init-1", "init-2"))
		must(t, o.StartsBefore("init-2", "init-3"))
		must(t, o.ExitsBefore("init-2", "init-3"))
		must(t, o.StartsBefore("init-3", "regular-1"))
		must(t, o.ExitsBefore("init-3", "regular-1"))
		must(t, o.HasNotRestarted("init-1"))
		must(t, o.HasNotRestarted("init-2"))
		must(t, o.HasNotRestarted("init-3"))
		must(t, o.HasRestarted("regular-1"))
	})
}

// cannotTerminatePod is upstream's "a pod cannot terminate gracefully"
// pod: its container ignores SIGTERM (upstream's sleep is PID 1, which
// the kernel spares; a process pod's sleep would die of it).
func cannotTerminatePod(name string, grace int64) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(grace),
		Containers: []v1.Container{ctr("regular1", []string{"sh", "-c", "trap '' TERM; sleep 10000 & wait $!; sleep 10000"})}}}
}

// "a pod cannot terminate gracefully: should respect termination grace
// period seconds". Upstream: grace 30 s, buffer 30 s; here 5 s and 10 s.
func TestContainersLifecycle_shouldRespectTerminationGracePeriodSeconds(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := cannotTerminatePod("pod-termination-grace-period", 5)
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if d := e.timeToGone(p.Name, nil); d > 15*time.Second {
			t.Errorf("the pod took %v to go, want at most the grace period 5s + 10s", d)
		}
	})
}

// "... should respect termination grace period seconds with long-running
// preStop hook". Same scaling.
func TestContainersLifecycle_shouldRespectTerminationGracePeriodSecondsWithLongRunningPreStopHook(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := cannotTerminatePod("pod-termination-grace-period-prestop", 5)
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PreStop: execHandler([]string{"sleep", "10000"})}
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if d := e.timeToGone(p.Name, nil); d > 15*time.Second {
			t.Errorf("the pod took %v to go, want at most the grace period 5s + 10s", d)
		}
	})
}

// preStopProbePod is upstream's pod for "A regular container has a
// PreStop hook": regular-1 runs long and takes TerminationSeconds to exit
// on SIGTERM (15 s upstream, 2 s here), its preStop logs.
func preStopProbePod(l orderLog, name string) *v1.Pod {
	c := ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 100, TerminationSeconds: 2}))
	c.Lifecycle = &v1.Lifecycle{PreStop: execHandler(l.execCommand("PreStop-regular-1", execCmd{Delay: 1}))}
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever, Containers: []v1.Container{c}}}
}

// "A regular container fails a startup probe: should call the
// container's preStop hook and terminate it if its startup probe fails".
// The probe's initial delay is 10 s upstream, 2 s here.
func TestContainersLifecycle_shouldCallTheContainersPreStopHookAndTerminateItIfItsStartupProbeFails(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := preStopProbePod(l, "test-pod-startup-prestop")
		p.Spec.Containers[0].StartupProbe = &v1.Probe{ProbeHandler: execProbeCmd("sh", "-c", "exit 1"), InitialDelaySeconds: 2, FailureThreshold: 1}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "regular-1 Exiting")
		must(t, o.RunTogether("regular-1", "PreStop-regular-1"))
		must(t, o.Starts("PreStop-regular-1"))
		must(t, o.Exits("regular-1"))
	})
}

// "A regular container fails a liveness probe: should call the
// container's preStop hook and terminate it if its liveness probe fails".
func TestContainersLifecycle_shouldCallTheContainersPreStopHookAndTerminateItIfItsLivenessProbeFails(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		p := preStopProbePod(l, "test-pod-liveness-prestop")
		p.Spec.Containers[0].LivenessProbe = &v1.Probe{ProbeHandler: execProbeCmd("sh", "-c", "exit 1"), InitialDelaySeconds: 2, FailureThreshold: 1}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "regular-1 Exiting")
		must(t, o.RunTogether("regular-1", "PreStop-regular-1"))
		must(t, o.Starts("PreStop-regular-1"))
		must(t, o.Exits("regular-1"))
	})
}

// "when a pod is terminating because its liveness probe fails: should
// execute readiness probe while in preStop, but not liveness". The
// kubelet stops liveness and startup probes when a container starts
// terminating, and keeps probing readiness until it exits. The liveness
// delay is 10 s upstream, 3 s here; the grace 100 s and the preStop's
// 10 s are upstream's.
func TestContainersLifecycle_shouldExecuteReadinessProbeWhileInPreStopButNotLiveness(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		c := ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 100, TerminationSeconds: 2}))
		c.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: l.execCommand("Liveness-regular-1", execCmd{ExitCode: 1})}},
			InitialDelaySeconds: 3, PeriodSeconds: 1, FailureThreshold: 1}
		c.ReadinessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: l.execCommand("Readiness-regular-1", execCmd{})}},
			InitialDelaySeconds: 1, PeriodSeconds: 1}
		c.Lifecycle = &v1.Lifecycle{PreStop: execHandler(l.execCommand("PreStop-regular-1", execCmd{Delay: 10}))}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "test-pod-readiness-in-prestop"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(100)), Containers: []v1.Container{c}}}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "regular-1 Exiting")
		// readiness probes are called during pod termination
		must(t, o.RunTogetherLhsFirst("PreStop-regular-1", "Readiness-regular-1"))
		// liveness probes are not called during pod termination
		mustFail(t, o.RunTogetherLhsFirst("PreStop-regular-1", "Liveness-regular-1"),
			"a liveness probe ran while the preStop hook ran:\n"+o.String())
	})
}

// "when a pod is terminating because its liveness probe fails: should not
// continue running liveness probes for restartable init containers and
// restart them while in preStop". The kubelet's pod worker is blocked in
// regular-1's kill (its preStop included): the sidecar, whose liveness
// probe failed, is neither killed nor restarted meanwhile, and its probe
// stays on hold. The preStop waits 5 s (upstream 10 s) before logging
// "Started" and then runs 10 s (upstream 40 s); regular-1 takes 2 s
// (upstream 15 s) to exit on SIGTERM.
func TestContainersLifecycle_shouldNotContinueRunningLivenessProbesForRestartableInitContainersAndRestartThemWhileInPreStop(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		l := e.newOrderLog()
		c := ctr("regular-1", l.execCommand("regular-1", execCmd{Delay: 100, TerminationSeconds: 2}))
		c.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: l.execCommand("Liveness-regular-1", execCmd{ExitCode: 1})}},
			InitialDelaySeconds: 10, PeriodSeconds: 1, FailureThreshold: 1}
		c.Lifecycle = &v1.Lifecycle{PreStop: execHandler(l.execCommand("PreStop-regular-1", execCmd{StartDelay: 5, Delay: 10}))}
		side := restartable("restartable-init-1", l.execCommand("restartable-init-1", execCmd{Delay: 100, TerminationSeconds: 1}))
		side.LivenessProbe = &v1.Probe{ProbeHandler: v1.ProbeHandler{Exec: &v1.ExecAction{Command: l.execCommand("Liveness-restartable-init-1", execCmd{ExitCode: 1})}},
			InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 1}
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "test-pod-sidecar-liveness-in-prestop"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(100)), InitContainers: []v1.Container{side}, Containers: []v1.Container{c}}}
		l.create(p)
		e.waitNoLongerRunning(p.Name, lifecycleTimeout)
		o := l.read(p.Name, "PreStop-regular-1 Exiting")
		// liveness probes are not called for restartable init containers during the preStop
		mustFail(t, o.StartsBefore("PreStop-regular-1", "Liveness-restartable-init-1"),
			"the sidecar's liveness probe ran after the preStop hook started:\n"+o.String())
		// restartable init containers are not restarted during the preStop
		mustFail(t, o.RunTogetherLhsFirst("PreStop-regular-1", "restartable-init-1"),
			"the sidecar restarted while the preStop hook ran:\n"+o.String())
	})
}
