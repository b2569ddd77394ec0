package conformance

// Ported from test/e2e/common/node/runtime.go ("Container Runtime
// blackbox test").

import (
	"fmt"
	"path"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The upstream ContainerStatusRetryTimeout is 5 minutes; these pods
// change state in seconds.
const statusTimeout = 60 * time.Second

// containerState is upstream's GetContainerState.
func containerState(s v1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return "Waiting"
	case s.Running != nil:
		return "Running"
	case s.Terminated != nil:
		return "Terminated"
	}
	return "Unknown"
}

// podReady is upstream's podutil.IsPodReady.
func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func condition(p *v1.Pod, t v1.PodConditionType) *v1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == t {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func onePod(name string, policy v1.RestartPolicy, c v1.Container) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.PodSpec{RestartPolicy: policy, Containers: []v1.Container{c}, TerminationGracePeriodSeconds: ptr(int64(2))}}
}

func status0(p *v1.Pod) v1.ContainerStatus {
	if len(p.Status.ContainerStatuses) == 0 {
		return v1.ContainerStatus{}
	}
	return p.Status.ContainerStatuses[0]
}

// "should run with the expected status [NodeConformance]" (Conformance:
// Container Runtime, Restart Policy, Pod Phases).
func TestContainerRuntime_shouldRunWithTheExpectedStatus(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		for _, tc := range []struct {
			name   string
			policy v1.RestartPolicy
			phase  v1.PodPhase
			state  string
			count  int32
			ready  bool
		}{
			{"terminate-cmd-rpa", v1.RestartPolicyAlways, v1.PodRunning, "Running", 2, true},
			{"terminate-cmd-rpof", v1.RestartPolicyOnFailure, v1.PodSucceeded, "Terminated", 1, false},
			{"terminate-cmd-rpn", v1.RestartPolicyNever, v1.PodFailed, "Terminated", 0, false},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				if tc.policy == v1.RestartPolicyAlways {
				}
				e := &env{t: t, n: e.n}
				p := onePod(tc.name, tc.policy, v1.Container{Name: tc.name})
				dir := e.scratch(p, v1.StorageMediumMemory, "/restart-count")
				// It failed at the 1st run, then succeeded at 2nd run, then run forever
				p.Spec.Containers[0].Command = []string{"sh", "-c", fmt.Sprintf(`
f=%s
count=$(echo 'hello' >> $f ; wc -l $f | awk {'print $1'})
if [ $count -eq 1 ]; then
	exit 1
fi
if [ $count -eq 2 ]; then
	exit 0
fi
while true; do sleep 1; done
`, path.Join(dir, "restartCount"))}
				e.create(p)
				e.waitPod(tc.name, statusTimeout, fmt.Sprintf("restartCount %d", tc.count), func(p *v1.Pod) bool {
					return status0(p).RestartCount == tc.count
				})
				got := e.waitPod(tc.name, statusTimeout, "phase "+string(tc.phase), func(p *v1.Pod) bool { return p.Status.Phase == tc.phase })
				if podReady(got) != tc.ready {
					t.Errorf("Ready = %v, want %v: %s", podReady(got), tc.ready, describe(got))
				}
				if s := containerState(status0(got).State); s != tc.state {
					t.Errorf("state = %s, want %s: %s", s, tc.state, describe(got))
				}
				// "should be possible to delete"
				e.delete(tc.name)
			})
		}
	})
}

// matchTerminationMessage is upstream's: run the container under
// restartPolicy Never, wait for the phase, and compare the terminated
// state's message.
func matchTerminationMessage(e *env, name string, c v1.Container, phase v1.PodPhase, want string) {
	e.t.Helper()
	c.Name = "termination-message-container"
	e.create(onePod(name, v1.RestartPolicyNever, c))
	p := e.waitPod(name, statusTimeout, "phase "+string(phase), func(p *v1.Pod) bool { return p.Status.Phase == phase })
	st := status0(p)
	if containerState(st.State) != "Terminated" {
		e.t.Fatalf("the container is not terminated: %s", describe(p))
	}
	if got := st.State.Terminated.Message; got != want {
		e.t.Errorf("termination message = %q, want %q", got, want)
	}
	e.delete(name)
}

// messagePath is where the container writes its termination message:
// the upstream path in a container; for a process pod, which sees the
// host's /dev, a file in a directory of the test's own.
func (e *env) messagePath(upstream string) string {
	if !e.process() {
		return upstream
	}
	return filepath.Join(e.hostDir(), path.Base(upstream))
}

// messageTarget is where the container's shell writes the message: the
// path itself in a container; in a process pod the file podvisor hands
// it (TERMINATION_MESSAGE_PATH, an inherited descriptor), since a host
// path would be shared by every process pod.
func (e *env) messageTarget(path string) string {
	if e.process() {
		return `"$TERMINATION_MESSAGE_PATH"`
	}
	return path
}

// "should report termination message if TerminationMessagePath is set [NodeConformance]"
func TestContainerRuntime_shouldReportTerminationMessageIfTerminationMessagePathIsSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := e.messagePath("/dev/termination-log")
		matchTerminationMessage(e, "termination-message-path", v1.Container{
			Command: []string{"/bin/sh", "-c"}, Args: []string{"/bin/echo -n DONE > " + e.messageTarget(p)},
			TerminationMessagePath: p, SecurityContext: &v1.SecurityContext{RunAsUser: ptr(int64(0))},
		}, v1.PodSucceeded, "DONE")
	})
}

// "should report termination message if TerminationMessagePath is set as non-root user and at a non-default path [NodeConformance]" (Conformance)
func TestContainerRuntime_shouldReportTerminationMessageAsNonRootUserAndAtANonDefaultPath(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := e.messagePath("/dev/termination-custom-log")
		matchTerminationMessage(e, "termination-message-nonroot", v1.Container{
			Command: []string{"/bin/sh", "-c"}, Args: []string{"/bin/echo -n DONE > " + e.messageTarget(p)},
			TerminationMessagePath: p, SecurityContext: &v1.SecurityContext{RunAsUser: ptr(int64(10000))},
		}, v1.PodSucceeded, "DONE")
	})
}

// "should report termination message from log output if TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance]" (Conformance)
func TestContainerRuntime_shouldReportTerminationMessageFromLogOutputIfFallbackToLogsOnErrorIsSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		matchTerminationMessage(e, "termination-message-fallback", v1.Container{
			Command: []string{"/bin/sh", "-c"}, Args: []string{"/bin/echo -n DONE; /bin/false"},
			TerminationMessagePath: e.messagePath("/dev/termination-log"), TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
		}, v1.PodFailed, "DONE")
	})
}

// "should report termination message as empty when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance]" (Conformance)
func TestContainerRuntime_shouldReportTerminationMessageAsEmptyWhenPodSucceedsAndFallbackToLogsOnErrorIsSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		matchTerminationMessage(e, "termination-message-empty", v1.Container{
			Command: []string{"/bin/sh", "-c"}, Args: []string{"/bin/echo -n DONE; /bin/true"},
			TerminationMessagePath: e.messagePath("/dev/termination-log"), TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
		}, v1.PodSucceeded, "")
	})
}

// "should report termination message from file when pod succeeds and TerminationMessagePolicy FallbackToLogsOnError is set [NodeConformance]" (Conformance)
func TestContainerRuntime_shouldReportTerminationMessageFromFileWhenPodSucceedsAndFallbackToLogsOnErrorIsSet(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := e.messagePath("/dev/termination-log")
		matchTerminationMessage(e, "termination-message-file", v1.Container{
			Command: []string{"/bin/sh", "-c"}, Args: []string{"/bin/echo -n OK > " + e.messageTarget(p) + "; /bin/echo DONE; /bin/true"},
			TerminationMessagePath: p, TerminationMessagePolicy: v1.TerminationMessageFallbackToLogsOnError,
		}, v1.PodSucceeded, "OK")
	})
}

// "should not be able to pull image from invalid registry [NodeConformance]".
// Containerd only: process pods have no image. The registry is one that
// refuses at once on this host (upstream: invalid.registry.k8s.io, which
// needs DNS).
func TestContainerRuntime_shouldNotBeAbleToPullImageFromInvalidRegistry(t *testing.T) {
	onContainerd(t, func(t *testing.T, e *env) {
		p := onePod("image-pull-test", v1.RestartPolicyNever, v1.Container{Name: "image-pull-test",
			Image: "127.0.0.1:1/invalid/alpine:3.1", ImagePullPolicy: v1.PullAlways,
			Command: []string{"/bin/sh", "-c", "while true; do sleep 1; done"}})
		e.create(p)
		got := e.waitPod(p.Name, statusTimeout, "waiting with ErrImagePull or ImagePullBackOff", func(p *v1.Pod) bool {
			w := status0(p).State.Waiting
			return w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff")
		})
		if got.Status.Phase != v1.PodPending {
			t.Errorf("phase = %s, want Pending", got.Status.Phase)
		}
	})
}
