package conformance

// Ported from test/e2e/common/node/init_container.go ("InitContainer
// [NodeConformance]"). Upstream's app container is the pause image; here
// it is `sleep`, which, like pause, runs until killed.

import (
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func initPod(name string, policy v1.RestartPolicy, init1, init2 string, run []string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"name": "foo"}},
		Spec: v1.PodSpec{RestartPolicy: policy, TerminationGracePeriodSeconds: ptr(int64(2)),
			InitContainers: []v1.Container{{Name: "init1", Command: []string{init1}}, {Name: "init2", Command: []string{init2}}},
			Containers: []v1.Container{{Name: "run1", Command: run, Resources: v1.ResourceRequirements{
				Limits: v1.ResourceList{v1.ResourceCPU: *resource.NewMilliQuantity(100, resource.DecimalSI)}}}}}}
}

var pause = []string{"sleep", "100000"}

// checkInitCompleted is the assertions both "should invoke init
// containers" tests end with.
func checkInitCompleted(t *testing.T, p *v1.Pod, phase v1.PodPhase) {
	t.Helper()
	if p.Status.Phase != phase {
		t.Errorf("phase = %s, want %s", p.Status.Phase, phase)
	}
	if c := condition(p, v1.PodInitialized); c == nil || c.Status != v1.ConditionTrue {
		t.Errorf("Initialized condition = %+v, want True", c)
	}
	if len(p.Status.InitContainerStatuses) != 2 {
		t.Fatalf("%d init container statuses, want 2", len(p.Status.InitContainerStatuses))
	}
	for _, s := range p.Status.InitContainerStatuses {
		if !s.Ready {
			t.Errorf("init container %s should be in Ready status", s.Name)
		}
		if s.State.Terminated == nil || s.State.Terminated.ExitCode != 0 {
			t.Errorf("init container %s: state %s, want terminated with exit code 0", s.Name, stateString(s.State))
		}
	}
}

// "should invoke init containers on a RestartNever pod" (Conformance)
func TestInitContainer_shouldInvokeInitContainersOnARestartNeverPod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		e.create(initPod("pod-init-never", v1.RestartPolicyNever, "/bin/true", "/bin/true", []string{"/bin/true"}))
		p := e.waitPod("pod-init-never", statusTimeout, "the pod completed", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
		})
		checkInitCompleted(t, p, v1.PodSucceeded)
	})
}

// "should invoke init containers on a RestartAlways pod" (Conformance)
func TestInitContainer_shouldInvokeInitContainersOnARestartAlwaysPod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		e.create(initPod("pod-init-always", v1.RestartPolicyAlways, "/bin/true", "/bin/true", pause))
		p := e.waitPod("pod-init-always", statusTimeout, "the pod running", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning
		})
		checkInitCompleted(t, p, v1.PodRunning)
	})
}

// watchUntil follows the pod through the watch: check may fail the test
// at any state it sees (upstream's watchtools.Until conditions), and
// returns true when done.
func (e *env) watchUntil(name, what string, check func(p *v1.Pod) (bool, error)) *v1.Pod {
	e.t.Helper()
	var failed error
	p := e.waitPod(name, statusTimeout, what, func(p *v1.Pod) bool {
		done, err := check(p)
		if err != nil {
			failed = fmt.Errorf("%v (pod: %s)", err, describe(p))
			return true
		}
		return done
	})
	if failed != nil {
		e.t.Fatal(failed)
	}
	return p
}

func appContainersWaitInitializing(p *v1.Pod) error {
	for _, s := range p.Status.ContainerStatuses {
		if s.State.Waiting == nil {
			return fmt.Errorf("container %q should not be out of waiting", s.Name)
		}
		if s.State.Waiting.Reason != "PodInitializing" {
			return fmt.Errorf("container %q should have reason PodInitializing", s.Name)
		}
	}
	return nil
}

// "should not start app containers if init containers fail on a RestartAlways pod" (Conformance)
func TestInitContainer_shouldNotStartAppContainersIfInitContainersFailOnARestartAlwaysPod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		e.create(initPod("pod-init-fail-always", v1.RestartPolicyAlways, "/bin/false", "/bin/true", pause))
		// check for the first container to fail at least once
		e.watchUntil("pod-init-fail-always", "init1 restarted", func(p *v1.Pod) (bool, error) {
			if err := appContainersWaitInitializing(p); err != nil {
				return false, err
			}
			if len(p.Status.InitContainerStatuses) != 2 {
				return false, nil
			}
			s := p.Status.InitContainerStatuses[1]
			if s.State.Waiting == nil {
				return false, fmt.Errorf("second init container should not be out of waiting")
			}
			if s.State.Waiting.Reason != "PodInitializing" {
				return false, fmt.Errorf("second init container should have reason PodInitializing")
			}
			s = p.Status.InitContainerStatuses[0]
			if s.State.Terminated != nil && s.State.Terminated.ExitCode == 0 {
				return false, fmt.Errorf("first init container should have exitCode != 0")
			}
			// continue until we see an attempt to restart the pod
			return s.LastTerminationState.Terminated != nil, nil
		})
		// verify we get two restarts
		p := e.watchUntil("pod-init-fail-always", "init1 restartCount 3", func(p *v1.Pod) (bool, error) {
			return p.Status.InitContainerStatuses[0].RestartCount >= 3, nil
		})
		if p.Status.Phase != v1.PodPending {
			t.Errorf("phase = %s, want Pending", p.Status.Phase)
		}
		c := condition(p, v1.PodInitialized)
		if c == nil || c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init1 init2]" {
			t.Errorf("Initialized condition = %+v, want False, ContainersNotInitialized, \"containers with incomplete status: [init1 init2]\"", c)
		}
		if len(p.Status.InitContainerStatuses) != 2 {
			t.Errorf("%d init container statuses, want 2", len(p.Status.InitContainerStatuses))
		}
	})
}

// "should not start app containers and fail the pod if init containers fail on a RestartNever pod" (Conformance)
func TestInitContainer_shouldNotStartAppContainersAndFailThePodIfInitContainersFailOnARestartNeverPod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		e.create(initPod("pod-init-fail-never", v1.RestartPolicyNever, "/bin/true", "/bin/false", []string{"/bin/true"}))
		// check for the second container to fail at least once
		e.watchUntil("pod-init-fail-never", "init2 failed", func(p *v1.Pod) (bool, error) {
			if err := appContainersWaitInitializing(p); err != nil {
				return false, err
			}
			if len(p.Status.InitContainerStatuses) != 2 {
				return false, nil
			}
			s := p.Status.InitContainerStatuses[0]
			if s.State.Terminated == nil {
				if s.State.Waiting != nil && s.State.Waiting.Reason != "PodInitializing" {
					return false, fmt.Errorf("second init container should have reason PodInitializing")
				}
				return false, nil
			}
			if s.State.Terminated.ExitCode != 0 {
				return false, fmt.Errorf("first init container should have exitCode != 0")
			}
			s = p.Status.InitContainerStatuses[1]
			if s.State.Terminated == nil {
				return false, nil
			}
			if s.State.Terminated.ExitCode == 0 {
				return false, fmt.Errorf("second init container should have failed")
			}
			return true, nil
		})
		p := e.waitPod("pod-init-fail-never", statusTimeout, "the pod completed", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodSucceeded || p.Status.Phase == v1.PodFailed
		})
		if p.Status.Phase != v1.PodFailed {
			t.Errorf("phase = %s, want Failed", p.Status.Phase)
		}
		c := condition(p, v1.PodInitialized)
		if c == nil || c.Status != v1.ConditionFalse || c.Reason != "ContainersNotInitialized" || c.Message != "containers with incomplete status: [init2]" {
			t.Errorf("Initialized condition = %+v, want False, ContainersNotInitialized, \"containers with incomplete status: [init2]\"", c)
		}
		if len(p.Status.InitContainerStatuses) != 2 {
			t.Errorf("%d init container statuses, want 2", len(p.Status.InitContainerStatuses))
		}
		if len(p.Status.ContainerStatuses) == 0 || p.Status.ContainerStatuses[0].State.Waiting == nil {
			t.Errorf("the app container is not waiting: %s", describe(p))
		}
	})
}
