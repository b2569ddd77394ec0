package conformance

// Ported from test/e2e/common/node/pods.go ("Pods"). The API server's
// create and delete are writing and removing the manifest; watch, logs,
// exec and readiness-gate conditions go through podvisor's local API.

import (
	"context"
	"net"
	"os"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func pausePod(name string) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"name": name}},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(2)), Containers: []v1.Container{{Name: "main", Command: pauseCommand}}}}
}

// "should get a host IP [NodeConformance]" (Conformance)
func TestPods_shouldGetAHostIP(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		e.create(pausePod("pod-hostip"))
		p := e.waitPod("pod-hostip", statusTimeout, "the pod running with a host IP", func(p *v1.Pod) bool {
			return p.Status.Phase == v1.PodRunning && p.Status.HostIP != ""
		})
		if net.ParseIP(p.Status.HostIP) == nil {
			t.Errorf("hostIP %q is not an IP", p.Status.HostIP)
		}
	})
}

// "should be submitted and removed [NodeConformance]" (Conformance)
func TestPods_shouldBeSubmittedAndRemoved(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := pausePod("pod-submit-remove")
		// Upstream deletes with a 30 s grace and checks the kubelet saw the
		// termination notice (deletionTimestamp, grace != 0) before the
		// pod went away: a container that ignores SIGTERM keeps it
		// terminating long enough to see.
		// It says when its trap is set: Running is its process started.
		p.Spec.Containers[0].Command = []string{"sh", "-c", "trap '' TERM; echo trap-set; while true; do sleep 0.2; done"}
		e.create(p)
		got := e.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.waitLog(got, p.Spec.Containers[0].Name, statusTimeout, "its TERM trap set", func(s string) bool { return strings.Contains(s, "trap-set") })
		if err := removeManifest(e, p.Name); err != nil {
			t.Fatal(err)
		}
		last := e.waitPod(p.Name, statusTimeout, "the pod terminating (deletionTimestamp set)", func(p *v1.Pod) bool { return p.DeletionTimestamp != nil })
		if last.Spec.TerminationGracePeriodSeconds == nil || *last.Spec.TerminationGracePeriodSeconds == 0 {
			t.Errorf("terminating pod's grace period: %v", last.Spec.TerminationGracePeriodSeconds)
		}
		e.waitGone(p.Name, statusTimeout)
	})
}

// "should support remote command execution over websockets [NodeConformance]" (Conformance)
func TestPods_shouldSupportRemoteCommandExecution(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := pausePod("pod-exec-websocket")
		p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "echo container is alive; sleep 600"}
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		out, errOut, code := e.cli("exec", p.Name, "--", "/bin/sh", "-c", "echo remote execution test")
		if code != 0 || out != "remote execution test\n" {
			t.Errorf("exec: code %d, stdout %q, stderr %q; want stdout %q", code, out, errOut, "remote execution test\n")
		}
	})
}

// "should support retrieving logs from the container over websockets [NodeConformance]" (Conformance)
func TestPods_shouldSupportRetrievingLogsFromTheContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := pausePod("pod-logs-websocket")
		p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "echo container is alive; sleep 10000"}
		e.create(p)
		got := e.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.waitLog(got, "main", statusTimeout, `exactly "container is alive\n"`, func(s string) bool { return s == "container is alive\n" })
	})
}

// "should support pod readiness gates [NodeConformance]"
func TestPods_shouldSupportPodReadinessGates(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		const cond1, cond2 = "k8s.io/test-condition1", "k8s.io/test-condition2"
		p := pausePod("pod-ready")
		p.Spec.ReadinessGates = []v1.PodReadinessGate{{ConditionType: cond1}, {ConditionType: cond2}}
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		notReady := func(p *v1.Pod) bool { return !podReady(p) }
		e.consistently(p.Name, 2e9, "the pod not ready with no gate set", notReady)
		set := func(typ string, status bool) {
			if err := e.n.client.SetCondition(context.Background(), "default", p.Name, typ, status); err != nil {
				t.Fatalf("setting %s=%v: %v", typ, status, err)
			}
		}
		set(cond1, true)
		e.consistently(p.Name, 2e9, "the pod not ready with only "+cond1+" set", notReady)
		set(cond2, true)
		e.waitPod(p.Name, statusTimeout, "the pod ready with both gates True", podReady)
		set(cond1, false)
		e.waitPod(p.Name, statusTimeout, "the pod not ready with "+cond1+" False", notReady)
	})
}

func removeManifest(e *env, name string) error {
	return os.Remove(strings.TrimSuffix(e.n.manifests(), "/") + "/" + name + ".yaml")
}
