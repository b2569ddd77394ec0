package conformance

// A few of test/e2e_node/container_lifecycle_test.go's "[NodeConformance]
// Containers Lifecycle" tests: the ordering of init containers, regular
// containers, postStart hooks and restartable init (sidecar) containers.
// Upstream's ExecCommand makes each container log "NAME Starting",
// "NAME Started" and "NAME Exiting" to a shared file, and the tests
// compare the order; so do these.

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// orderLog is the shared file, as the containers and the test see it.
type orderLog struct {
	inPod, onHost string
}

// newOrderLog gives the pod a directory for the log: a host directory for
// process pods, an emptyDir on containerd (read back through exec).
func (e *env) newOrderLog(p *v1.Pod) orderLog {
	dir := e.scratch(p, "", "/persistent")
	l := orderLog{inPod: dir + "/log"}
	if e.process() {
		l.onHost = l.inPod
	}
	return l
}

// execCommand is upstream's ExecCommand: log, run for delay seconds (or
// until SIGTERM), log, exit with code.
func (l orderLog) execCommand(name string, delay, code int) []string {
	return []string{"sh", "-c", fmt.Sprintf(`log() { echo "%[1]s $1" >> %[2]s; }
log Starting; log Started
trap 'log Exiting; exit 0' TERM
sleep %[3]d & wait
log Exiting; exit %[4]d`, name, l.inPod, delay, code)}
}

// hookCommand logs a hook's run, as upstream's prefixed ExecCommand.
func (l orderLog) hookCommand(name string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`echo "%[1]s Starting" >> %[2]s; sleep 1; echo "%[1]s Exiting" >> %[2]s`, name, l.inPod)}
}

// orderLines reads the log: from the host for a process pod, through
// exec into a running container on containerd, retrying until want is
// in it or 10 s have passed.
func (e *env) orderLines(l orderLog, pod, container, want string) []string {
	e.t.Helper()
	var lines []string
	var failure string
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if l.onHost != "" {
			b, _ := os.ReadFile(l.onHost)
			lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		} else if out, errOut, code := e.cli("exec", pod, "-c", container, "--", "cat", l.inPod); code == 0 {
			lines = strings.Split(strings.TrimSpace(out), "\n")
		} else {
			failure = errOut
		}
		if slices.Contains(lines, want) {
			return lines
		}
		if time.Now().After(end) {
			e.t.Fatalf("not within 10s: %q in the order log of pod %s (log: %q, last read error: %s)", want, pod, lines, failure)
		}
	}
}

// before asserts that line a comes before line b (upstream's
// ExpectHappensBefore).
func before(t *testing.T, lines []string, a, b string) {
	t.Helper()
	i, j := slices.Index(lines, a), slices.Index(lines, b)
	if i < 0 || j < 0 || i >= j {
		t.Errorf("%q should happen before %q; log:\n%s", a, b, strings.Join(lines, "\n"))
	}
}

// A reader container keeps the pod's emptyDir readable once the others
// have finished (containerd only reads it through exec).
func withReader(p *v1.Pod) {
	p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: "reader", Command: pauseCommand})
}

// "should launch init container serially before a regular container"
func TestContainersLifecycle_shouldLaunchInitContainerSeriallyBeforeARegularContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "initcontainer-test-pod"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			InitContainers:                []v1.Container{{Name: "init-1"}, {Name: "init-2"}, {Name: "init-3"}},
			Containers:                    []v1.Container{{Name: "regular-1"}}}}
		withReader(p)
		l := e.newOrderLog(p)
		for i := range p.Spec.InitContainers {
			p.Spec.InitContainers[i].Command = l.execCommand(p.Spec.InitContainers[i].Name, 1, 0)
		}
		p.Spec.Containers[0].Command = l.execCommand("regular-1", 1, 0)
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "regular-1 terminated", func(p *v1.Pod) bool {
			return len(p.Status.ContainerStatuses) > 0 && statusNamed(p, "regular-1").State.Terminated != nil
		})
		lines := e.orderLines(l, p.Name, "reader", "regular-1 Exiting")
		before(t, lines, "init-1 Exiting", "init-2 Starting")
		before(t, lines, "init-2 Exiting", "init-3 Starting")
		before(t, lines, "init-3 Exiting", "regular-1 Starting")
	})
}

// "should not launch regular containers if an init container fails"
func TestContainersLifecycle_shouldNotLaunchRegularContainersIfAnInitContainerFails(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "initcontainer-test-pod-failure"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			InitContainers:                []v1.Container{{Name: "init-1"}},
			Containers:                    []v1.Container{{Name: "regular-1"}}}}
		l := e.newOrderLog(p)
		p.Spec.InitContainers[0].Command = l.execCommand("init-1", 1, 1)
		p.Spec.Containers[0].Command = l.execCommand("regular-1", 1, 0)
		e.create(p)
		got := e.waitPod(p.Name, statusTimeout, "the pod Failed", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
		if s := statusNamed(got, "regular-1"); s.State.Waiting == nil {
			t.Errorf("regular-1 should not have started: %s", describe(got))
		}
		if l.onHost != "" { // containerd: no container left running to read it through
			lines := e.orderLines(l, p.Name, "", "init-1 Exiting")
			if slices.Contains(lines, "regular-1 Starting") {
				t.Errorf("regular-1 started after init-1 failed; log:\n%s", strings.Join(lines, "\n"))
			}
		}
	})
}

// "should run Init container to completion before call to PostStart of regular container"
func TestContainersLifecycle_shouldRunInitContainerToCompletionBeforeCallToPostStartOfRegularContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "initcontainer-test-pod-with-post-start"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			InitContainers: []v1.Container{{Name: "init-1"}},
			Containers:     []v1.Container{{Name: "regular-1"}}}}
		l := e.newOrderLog(p)
		p.Spec.InitContainers[0].Command = l.execCommand("init-1", 1, 0)
		p.Spec.Containers[0].Command = l.execCommand("regular-1", 600, 0)
		p.Spec.Containers[0].Lifecycle = &v1.Lifecycle{PostStart: &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: l.hookCommand("PostStart-regular-1")}}}
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "regular-1 running", func(p *v1.Pod) bool { return statusNamed(p, "regular-1").State.Running != nil })
		lines := e.orderLines(l, p.Name, "regular-1", "PostStart-regular-1 Exiting")
		before(t, lines, "init-1 Exiting", "PostStart-regular-1 Starting")
	})
}

// "should launch restartable init containers before the regular container"
// (Containers Lifecycle, restartable init containers)
func TestContainersLifecycle_shouldLaunchRestartableInitContainersBeforeTheRegularContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "restartable-init-containers-start-serially"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			InitContainers: []v1.Container{{Name: "restartable-init-1", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)},
				{Name: "restartable-init-2", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)}},
			Containers: []v1.Container{{Name: "regular-1"}}}}
		l := e.newOrderLog(p)
		p.Spec.InitContainers[0].Command = l.execCommand("restartable-init-1", 600, 0)
		p.Spec.InitContainers[1].Command = l.execCommand("restartable-init-2", 600, 0)
		p.Spec.Containers[0].Command = l.execCommand("regular-1", 600, 0)
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "regular-1 running", func(p *v1.Pod) bool { return statusNamed(p, "regular-1").State.Running != nil })
		lines := e.orderLines(l, p.Name, "regular-1", "regular-1 Started")
		before(t, lines, "restartable-init-1 Started", "restartable-init-2 Starting")
		before(t, lines, "restartable-init-2 Started", "regular-1 Starting")
	})
}

// "should terminate sidecars in reverse order after all main containers have exited"
func TestContainersLifecycle_shouldTerminateSidecarsInReverseOrderAfterAllMainContainersHaveExited(t *testing.T) {
	onProcess(t, func(t *testing.T, e *env) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "sidecar-terminate-reverse"}, Spec: v1.PodSpec{RestartPolicy: v1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(5)),
			InitContainers: []v1.Container{{Name: "init-1", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)},
				{Name: "init-2", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)},
				{Name: "init-3", RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)}},
			Containers: []v1.Container{{Name: "regular-1"}}}}
		l := e.newOrderLog(p)
		for i := range p.Spec.InitContainers {
			p.Spec.InitContainers[i].Command = l.execCommand(p.Spec.InitContainers[i].Name, 600, 0)
		}
		p.Spec.Containers[0].Command = l.execCommand("regular-1", 2, 0)
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "the pod Succeeded, its sidecars terminated", func(p *v1.Pod) bool {
			done := p.Status.Phase == v1.PodSucceeded
			for _, s := range p.Status.InitContainerStatuses {
				done = done && s.State.Terminated != nil
			}
			return done
		})
		lines := e.orderLines(l, p.Name, "", "init-1 Exiting")
		before(t, lines, "regular-1 Exiting", "init-3 Exiting")
		before(t, lines, "init-3 Exiting", "init-2 Exiting")
		before(t, lines, "init-2 Exiting", "init-1 Exiting")
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
