package conformance

// Ported from test/e2e/common/node/lifecycle_hook.go ("Container
// Lifecycle Hook" and "Restartable Init Container Lifecycle Hook").
//
// Upstream runs a handler pod that logs the requests it gets; the hooks
// call it. Exec hooks call the handler pod's IP, as upstream. Upstream's
// httpGet hooks call a netexec sidecar in the hooked pod that forwards to
// the handler pod; process pods share the host's network, so the hook's
// default host (the pod IP) is already the handler's address, and on
// containerd the hook names the handler pod's IP as its host: the
// forwarder is left out. For the https variants the handler pod gets
// upstream's second container, netexec serving HTTPS (the suite's
// agnhost, with a self-signed certificate the hook must not verify).

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// handlerPod is upstream's pod-handle-http-request: it logs the request
// line of every HTTP request and answers 200.
func (e *env) handlerPod(name string) (ip string, port int) {
	e.t.Helper()
	ip, port, _ = e.handlerPodTLS(name, false)
	return ip, port
}

// Upstream's handler pod's containers: the test reads the log of the one
// its hook called.
const (
	httpHandler  = "container-handle-http-request"
	httpsHandler = "container-handle-https-request"
)

// handlerPodTLS is handlerPod, with upstream's second container, netexec
// on HTTPS, if withHTTPS (its port is upstream's 9090 on containerd).
func (e *env) handlerPodTLS(name string, withHTTPS bool) (ip string, port, httpsPort int) {
	e.t.Helper()
	port = e.port(8080)
	script := fmt.Sprintf(`exec busybox nc -ll -p %d -e sh -c 'read l; echo "$l" >&2; while read h && [ "$h" != "$(printf "\r")" ]; do :; done; printf "HTTP/1.0 200 OK\r\n\r\nok\n"'`, port)
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1)),
		Containers: []v1.Container{{Name: httpHandler, Command: []string{"sh", "-c", script},
			// Ready once nc listens: a hook run at once must find it
			// (upstream's agnhost is slower to start than its pod's
			// hooks; a process here is not).
			ReadinessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}}, PeriodSeconds: 1}}}}}
	if withHTTPS {
		httpsPort = e.port(9090)
		p.Spec.Containers = append(p.Spec.Containers, v1.Container{Name: httpsHandler,
			Command: e.agnhostCommand("netexec", "--http-port", fmt.Sprint(httpsPort), "--https"),
			Ports:   []v1.ContainerPort{{ContainerPort: int32(httpsPort), Protocol: v1.ProtocolTCP}}})
	}
	e.create(p)
	got := e.waitPod(name, statusTimeout, "the handler pod running and ready (nc listening), with an IP", func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodRunning && p.Status.PodIP != "" && podReady(p)
	})
	if withHTTPS {
		// Upstream's CreateSync waits for the pod to be ready: here, for
		// the HTTPS server to listen, so a postStart hook finds it.
		e.waitLog(got, httpsHandler, statusTimeout, "the HTTPS handler serving", func(s string) bool { return strings.Contains(s, "serving on") })
	}
	return got.Status.PodIP, port, httpsPort
}

// pauseCommand stands for the pause image: it runs until SIGTERM.
var pauseCommand = []string{"sh", "-c", "trap 'exit 0' TERM; while true; do sleep 0.2; done"}

// testPodWithHook is upstream's: create the hooked pod, wait for the
// poststart request at the handler, delete the pod (grace 15 s) and wait
// for the prestop request.
func testPodWithHook(e *env, handler string, p *v1.Pod, hooked *v1.Container) {
	e.t.Helper()
	e.create(p)
	e.waitPod(p.Name, 2*time.Minute, "the hooked pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
	h := e.get(handler)
	if hooked.Lifecycle.PostStart != nil {
		e.waitLog(h, handlerContainer(hooked.Lifecycle.PostStart), 2*time.Minute, "the poststart request at the handler", regexp.MustCompile(`GET /echo\?msg=poststart`).MatchString)
	}
	e.delete(p.Name)
	if hooked.Lifecycle.PreStop != nil {
		e.waitLog(h, handlerContainer(hooked.Lifecycle.PreStop), 30*time.Second, "the prestop request at the handler", regexp.MustCompile(`GET /echo\?msg=prestop`).MatchString)
	}
}

// handlerContainer is the handler container a hook calls: the HTTPS one
// for an https hook, as upstream picks it.
func handlerContainer(h *v1.LifecycleHandler) string {
	if h.HTTPGet != nil && h.HTTPGet.Scheme == v1.URISchemeHTTPS {
		return httpsHandler
	}
	return httpHandler
}

// hookPod is upstream's getPodWithHook, or, for a restartable init
// container, the hook on a sidecar before a regular container.
func hookPod(name string, sidecar bool, lifecycle *v1.Lifecycle) (*v1.Pod, *v1.Container) {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(15)),
		Containers: []v1.Container{{Name: name, Command: pauseCommand, Lifecycle: lifecycle}}}}
	if !sidecar {
		return p, &p.Spec.Containers[0]
	}
	p.Spec.InitContainers = []v1.Container{{Name: name, Command: pauseCommand, Lifecycle: lifecycle, RestartPolicy: ptr(v1.ContainerRestartPolicyAlways)}}
	p.Spec.Containers[0] = v1.Container{Name: "main", Command: pauseCommand}
	return p, &p.Spec.InitContainers[0]
}

func execHook(target string, port int, msg string) *v1.LifecycleHandler {
	return &v1.LifecycleHandler{Exec: &v1.ExecAction{Command: []string{"sh", "-c", fmt.Sprintf("busybox wget -q -O- 'http://%s:%d/echo?msg=%s'", target, port, msg)}}}
}

// httpHook calls the handler: at the pod's own IP (the default host) for
// a process pod, which shares the handler's host network; at the
// handler pod's IP on containerd, where upstream's forwarder sidecar
// would be.
func (e *env) httpHook(handlerIP string, port int, msg string) *v1.LifecycleHandler {
	h := &v1.LifecycleHandler{HTTPGet: &v1.HTTPGetAction{Path: "/echo?msg=" + msg, Port: intstr.FromInt32(int32(port))}}
	if !e.process() {
		h.HTTPGet.Host = handlerIP
	}
	return h
}

// httpsHook is httpHook on HTTPS, to the handler's netexec container.
func (e *env) httpsHook(handlerIP string, port int, msg string) *v1.LifecycleHandler {
	h := e.httpHook(handlerIP, port, msg)
	h.HTTPGet.Scheme = v1.URISchemeHTTPS
	return h
}

func hookTests(t *testing.T, sidecar bool, prefix string) {
	// "should execute poststart exec hook properly [NodeConformance]" (Conformance)
	t.Run("shouldExecutePoststartExecHookProperly", func(t *testing.T) {
		onBoth(t, func(t *testing.T, e *env) {
			ip, port := e.handlerPod(prefix + "handler-poststart-exec")
			p, c := hookPod(prefix+"pod-with-poststart-exec-hook", sidecar, &v1.Lifecycle{PostStart: execHook(ip, port, "poststart")})
			testPodWithHook(e, prefix+"handler-poststart-exec", p, c)
		})
	})
	// "should execute prestop exec hook properly [NodeConformance]" (Conformance)
	t.Run("shouldExecutePrestopExecHookProperly", func(t *testing.T) {
		onBoth(t, func(t *testing.T, e *env) {
			ip, port := e.handlerPod(prefix + "handler-prestop-exec")
			p, c := hookPod(prefix+"pod-with-prestop-exec-hook", sidecar, &v1.Lifecycle{PreStop: execHook(ip, port, "prestop")})
			testPodWithHook(e, prefix+"handler-prestop-exec", p, c)
		})
	})
	// "should execute poststart http hook properly [NodeConformance]" (Conformance)
	t.Run("shouldExecutePoststartHttpHookProperly", func(t *testing.T) {
		onBoth(t, func(t *testing.T, e *env) {
			ip, port := e.handlerPod(prefix + "handler-poststart-http")
			p, c := hookPod(prefix+"pod-with-poststart-http-hook", sidecar, &v1.Lifecycle{PostStart: e.httpHook(ip, port, "poststart")})
			testPodWithHook(e, prefix+"handler-poststart-http", p, c)
		})
	})
	// "should execute prestop http hook properly [NodeConformance]" (Conformance)
	t.Run("shouldExecutePrestopHttpHookProperly", func(t *testing.T) {
		onBoth(t, func(t *testing.T, e *env) {
			ip, port := e.handlerPod(prefix + "handler-prestop-http")
			p, c := hookPod(prefix+"pod-with-prestop-http-hook", sidecar, &v1.Lifecycle{PreStop: e.httpHook(ip, port, "prestop")})
			testPodWithHook(e, prefix+"handler-prestop-http", p, c)
		})
	})
	// "should execute poststart https hook properly [NodeConformance]"
	t.Run("shouldExecutePoststartHttpsHookProperly", func(t *testing.T) {
		onBoth(t, func(t *testing.T, e *env) {
			ip, _, port := e.handlerPodTLS(prefix+"handler-poststart-https", true)
			p, c := hookPod(prefix+"pod-with-poststart-https-hook", sidecar, &v1.Lifecycle{PostStart: e.httpsHook(ip, port, "poststart")})
			testPodWithHook(e, prefix+"handler-poststart-https", p, c)
		})
	})
	// "should execute prestop https hook properly [NodeConformance]"
	t.Run("shouldExecutePrestopHttpsHookProperly", func(t *testing.T) {
		onBoth(t, func(t *testing.T, e *env) {
			ip, _, port := e.handlerPodTLS(prefix+"handler-prestop-https", true)
			p, c := hookPod(prefix+"pod-with-prestop-https-hook", sidecar, &v1.Lifecycle{PreStop: e.httpsHook(ip, port, "prestop")})
			testPodWithHook(e, prefix+"handler-prestop-https", p, c)
		})
	})
}

// "Container Lifecycle Hook when create a pod with lifecycle hook ..."
func TestContainerLifecycleHook(t *testing.T) {
	t.Parallel()
	hookTests(t, false, "")
}

// "Restartable Init Container Lifecycle Hook when create a pod with lifecycle hook ..."
func TestRestartableInitContainerLifecycleHook(t *testing.T) {
	t.Parallel()
	hookTests(t, true, "sidecar-")
}

// From the same file, "Lifecycle Sleep Hook" and "Lifecycle sleep action
// zero value". Upstream sleeps 50 s within a 100 s grace; here 5 s within
// 20 s (and 20 s within 30 s, shortened to 4 s, for the runtime grace
// change): the slack above the expected time covers a containerd pod's
// teardown on 2 busy cores. Upstream derives the time from deletion to
// the container's finish from deletionTimestamp; here it is measured from
// the manifest's removal to the pod's disappearance, on the same clock.

// timeToGone removes the pod's manifest, optionally shortens the grace
// period through the API (upstream's delete with a grace period), and
// measures how long the pod takes to go.
func (e *env) timeToGone(name string, grace *int64) time.Duration {
	e.t.Helper()
	start := time.Now()
	if err := removeManifest(e, name); err != nil {
		e.t.Fatal(err)
	}
	if grace != nil {
		e.waitRemovalSeen(name)
		if _, err := e.n.client.Delete(context.Background(), "default", name, grace, false); err != nil && e.listed(name) {
			e.t.Fatalf("shortening the grace period of pod %s: %v", name, err)
		}
	}
	e.waitGone(name, 60*time.Second)
	return time.Since(start)
}

// listed reports whether the pod is listed (a pod that terminated before
// a delete could shorten its grace is gone).
func (e *env) listed(name string) bool {
	list, err := e.n.client.Pods(context.Background())
	return err != nil || hasPod(list.Items, name)
}

func sleepHookPod(name string, seconds int64, grace int64) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(grace),
		Containers: []v1.Container{{Name: name, Command: pauseCommand, Lifecycle: &v1.Lifecycle{PreStop: &v1.LifecycleHandler{Sleep: &v1.SleepAction{Seconds: seconds}}}}}}}
}

// "Lifecycle Sleep Hook ... valid prestop hook using sleep action"
func TestLifecycleSleepHook_validPrestopHookUsingSleepAction(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		const sleepSeconds, gracePeriod = 5, 20
		e.create(sleepHookPod("pod-with-prestop-sleep-hook", sleepSeconds, gracePeriod))
		e.waitPod("pod-with-prestop-sleep-hook", statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		// longer than the sleep, shorter than the grace period
		if d := e.timeToGone("pod-with-prestop-sleep-hook", nil); d < sleepSeconds*time.Second || d > gracePeriod*time.Second {
			t.Errorf("unexpected delay duration before killing the pod: %v, want between %ds and %ds", d, sleepSeconds, gracePeriod)
		}
	})
}

// "Lifecycle Sleep Hook ... reduce GracePeriodSeconds during runtime"
func TestLifecycleSleepHook_reduceGracePeriodSecondsDuringRuntime(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		const sleepSeconds, gracePeriod = 20, 4
		e.create(sleepHookPod("pod-with-prestop-sleep-hook-reduce", sleepSeconds, 30))
		e.waitPod("pod-with-prestop-sleep-hook-reduce", statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		// longer than the new grace period, shorter than the sleep
		if d := e.timeToGone("pod-with-prestop-sleep-hook-reduce", ptr(int64(gracePeriod))); d < gracePeriod*time.Second || d > sleepSeconds*time.Second {
			t.Errorf("unexpected delay duration before killing the pod: %v, want between %ds and %ds", d, gracePeriod, sleepSeconds)
		}
	})
}

// "Lifecycle Sleep Hook ... ignore terminated container"
func TestLifecycleSleepHook_ignoreTerminatedContainer(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		const sleepSeconds = 10
		p := sleepHookPod("pod-with-prestop-sleep-hook-terminated", sleepSeconds, 30)
		p.Spec.Containers[0].Command = []string{"/bin/sh", "-c", "sleep 3"}
		p.Spec.RestartPolicy = v1.RestartPolicyNever
		e.create(p)
		got := e.waitPod(p.Name, statusTimeout, "the container terminated", func(p *v1.Pod) bool { return status0(p).State.Terminated != nil })
		term := status0(got).State.Terminated
		// shorter than the sleep: a terminated container's preStop is not run
		if cost := term.FinishedAt.Sub(term.StartedAt.Time); cost < 0 || cost > sleepSeconds*time.Second {
			t.Errorf("unexpected delay duration before killing the pod, cost = %v", cost)
		}
	})
}

// "Lifecycle sleep action zero value ... prestop hook using sleep action with zero duration"
func TestLifecycleSleepActionZeroValue_prestopHookUsingSleepActionWithZeroDuration(t *testing.T) {
	onBoth(t, func(t *testing.T, e *env) {
		e.create(sleepHookPod("pod-with-prestop-sleep-hook-zero-duration", 0, 30))
		e.waitPod("pod-with-prestop-sleep-hook-zero-duration", statusTimeout, "the pod running", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning })
		if d := e.timeToGone("pod-with-prestop-sleep-hook-zero-duration", nil); d > 30*time.Second {
			t.Errorf("unexpected delay duration before killing the pod, cost = %v", d)
		}
	})
}
