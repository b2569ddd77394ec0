package conformance

// Ported from test/e2e/node/pre_stop.go ("PreStop").

import (
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// "should call prestop when killing a pod" (Conformance). Upstream's server
// (agnhost nettest) counts what it received; here the handler pod logs
// each request line, and the prestop write must be there exactly once.
func TestPreStop_shouldCallPrestopWhenKillingAPod(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		ip, port := e.handlerPod("server")
		tester := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "tester"}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(10)),
			Containers: []v1.Container{{Name: "tester", Command: pauseCommand, Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{
				Command: []string{"sh", "-c", fmt.Sprintf(`busybox wget -q -O- --post-data='{"Source": "prestop"}' http://%s:%d/write`, ip, port)}}}}}}}}
		e.create(tester)
		e.waitPod("tester", statusTimeout, "the tester pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		e.delete("tester")
		log := e.waitLog(e.get("server"), "container-handle-http-request", 30*time.Second, "the prestop request at the server",
			func(s string) bool { return strings.Contains(s, "POST /write") })
		if n := strings.Count(log, "POST /write"); n != 1 {
			t.Errorf("the server received the prestop write %d times, want 1:\n%s", n, log)
		}
	})
}

// "graceful pod terminated should wait until preStop hook completes the
// process". Upstream: grace 30 s, checked after 15 s; here 10 s and 5 s.
func TestPreStop_gracefulPodTerminatedShouldWaitUntilPreStopHookCompletesTheProcess(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pod-prestop-hook"}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(10)),
			Containers: []v1.Container{{Name: "nginx", Command: pauseCommand, Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Exec: &v1.ExecAction{
				Command: []string{"sh", "-c", "while true; do echo preStop; sleep 1; done"}}}}}}}}
		e.create(p)
		e.waitPod(p.Name, statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if err := removeManifest(e, p.Name); err != nil {
			t.Fatal(err)
		}
		// wait for less than the grace period, so the preStop hook is
		// still executing
		time.Sleep(5 * time.Second)
		if got := e.get(p.Name); got.Status.Phase != v1.PodRunning {
			t.Errorf("the pod should be running while in the graceful period termination: %s", describe(got))
		}
		e.waitGone(p.Name, 60*time.Second)
	})
}
