package podrow

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var now = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func statusPod(states ...v1.ContainerStatus) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.NewTime(now.Add(-90 * time.Second))}}
	for _, s := range states {
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: s.Name})
	}
	p.Status.Phase = v1.PodRunning
	p.Status.ContainerStatuses = states
	return p
}

func TestColumns(t *testing.T) {
	finished := metav1.NewTime(now.Add(-5 * time.Second))
	cases := []struct {
		name string
		pod  *v1.Pod
		want Row
	}{
		{"running", statusPod(v1.ContainerStatus{Name: "a", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}),
			Row{"1/1", "Running", "0", "90s"}},
		{"crash loop", statusPod(v1.ContainerStatus{Name: "a", RestartCount: 4,
			State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, FinishedAt: finished}}}),
			Row{"0/1", "CrashLoopBackOff", "4 (5s ago)", "90s"}},
		{"killed without reason", statusPod(v1.ContainerStatus{Name: "a",
			State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 137, Signal: 9}}}),
			Row{"0/1", "Signal:9", "0", "90s"}},
		{"one of two ready", statusPod(
			v1.ContainerStatus{Name: "a", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
			v1.ContainerStatus{Name: "b", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "ContainerCreating"}}}),
			Row{"1/2", "ContainerCreating", "0", "90s"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.pod, now); got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	term := statusPod(v1.ContainerStatus{Name: "a", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}})
	term.DeletionTimestamp = &finished
	if got := Of(term, now).Status; got != "Terminating" {
		t.Fatalf("deleting pod status = %q", got)
	}
	invalid := &v1.Pod{Status: v1.PodStatus{Phase: v1.PodPending, Reason: "Invalid"}}
	if got := Of(invalid, now).Status; got != "Invalid" {
		t.Fatalf("invalid row status = %q", got)
	}
}

// kubectl's printPod for init containers: the failed one's reason after
// "Init:", the count done while one runs, never a pod-level reason the
// kubelet does not set.
func TestInitColumns(t *testing.T) {
	initPod := func(phase v1.PodPhase, inits ...v1.ContainerStatus) *v1.Pod {
		p := statusPod(v1.ContainerStatus{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}})
		p.Status.Phase = phase
		for _, s := range inits {
			p.Spec.InitContainers = append(p.Spec.InitContainers, v1.Container{Name: s.Name})
		}
		p.Status.InitContainerStatuses = inits
		return p
	}
	waiting := func(name, reason string) v1.ContainerStatus {
		return v1.ContainerStatus{Name: name, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: reason}}}
	}
	failed := v1.ContainerStatus{Name: "init1", State: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}}}
	cases := []struct {
		name string
		pod  *v1.Pod
		want string
	}{
		{"failed under Never", initPod(v1.PodFailed, failed, waiting("init2", "PodInitializing")), "Init:Error"},
		{"crash loop", initPod(v1.PodPending, waiting("init1", "CrashLoopBackOff"), waiting("init2", "PodInitializing")), "Init:CrashLoopBackOff"},
		{"first running", initPod(v1.PodPending, v1.ContainerStatus{Name: "init1", State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}},
			waiting("init2", "PodInitializing")), "Init:0/2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := Of(tc.pod, now).Status; got != tc.want {
				t.Fatalf("STATUS %q, want %q", got, tc.want)
			}
		})
	}
}

// RESTARTS as kubectl counts them: the init containers' while the pod
// initializes; afterwards the app containers' and the sidecars', not a
// completed init container's.
func TestRestartsColumn(t *testing.T) {
	always := v1.ContainerRestartPolicyAlways
	done := v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	running := v1.ContainerState{Running: &v1.ContainerStateRunning{}}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.NewTime(now.Add(-time.Minute))}}
	p.Spec.InitContainers = []v1.Container{{Name: "init"}, {Name: "side", RestartPolicy: &always}}
	p.Spec.Containers = []v1.Container{{Name: "app"}}
	p.Status.Phase = v1.PodRunning
	p.Status.Conditions = []v1.PodCondition{{Type: v1.PodInitialized, Status: v1.ConditionTrue}, {Type: v1.PodReady, Status: v1.ConditionTrue}}
	started := true
	p.Status.InitContainerStatuses = []v1.ContainerStatus{
		{Name: "init", RestartCount: 4, State: done},
		{Name: "side", RestartCount: 2, State: running, Started: &started, Ready: true},
	}
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", RestartCount: 1, State: running, Ready: true}}
	if got := Of(p, now); got.Restarts != "3" || got.Ready != "2/2" || got.Status != "Running" {
		t.Fatalf("initialized: %+v, want 3 restarts (sidecar 2 + app 1), 2/2 Running", got)
	}
	// Still initializing: the init container in a crash loop counts.
	p.Status.Conditions = nil
	p.Status.InitContainerStatuses = []v1.ContainerStatus{
		{Name: "init", RestartCount: 4, State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
		{Name: "side", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}},
	}
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
	if got := Of(p, now); got.Restarts != "4" || got.Status != "Init:CrashLoopBackOff" {
		t.Fatalf("initializing: %+v, want 4 restarts, Init:CrashLoopBackOff", got)
	}
	// A finished pod being deleted keeps its status.
	p.Status.Phase = v1.PodSucceeded
	p.Status.InitContainerStatuses = nil
	p.Spec.InitContainers = nil
	p.Status.ContainerStatuses = []v1.ContainerStatus{{Name: "app", State: done}}
	p.DeletionTimestamp = &metav1.Time{Time: now}
	if got := Of(p, now).Status; got != "Completed" {
		t.Fatalf("deleted Succeeded pod: %q, want Completed (kubectl shows Terminating only for a pod not finished)", got)
	}
}
