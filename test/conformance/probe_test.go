package conformance

// Ported from test/e2e/common/node/container_probe.go ("Probing
// container" and "Probing restartable init container": the same tests,
// the probed container a sidecar before a pause container).
//
// Timings are scaled so the suite runs in minutes: initial delays of 15 s
// are 2 s, a container's "sleep 10" before it turns unhealthy is 3 s,
// probes left at the 10 s default period get 1 s, and the 1-4 minute
// observation windows of tests that expect no restart are 10 s. Each
// test's assertion is upstream's. agnhost's HTTP servers are busybox
// httpd: test-webserver serves "/", liveness serves /healthz for its
// first seconds and /redirect (a CGI script here, at /cgi-bin/redirect);
// its gRPC health server is the suite's own agnhost (./agnhost), built
// on google.golang.org/grpc's health server.

import (
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

const (
	probeDelay = 2 // upstream probeTestInitialDelaySeconds = 15
	// quietProbeDelay and a 5 s timeout for "*not* restarted" probes of
	// a shell-started server: one slow start or answer on 2 busy cores
	// would be a restart, which is not what those tests are about.
	quietProbeDelay    = 5
	unhealthyAfter     = 3                // upstream "sleep 10"
	observationWindow  = 10 * time.Second // upstream defaultObservationTimeout = 4 min, for "no restart"
	restartObservation = 60 * time.Second // upstream defaultObservationTimeout, for restarts
)

// probeEnv is one runtime and one of the two upstream variants.
type probeEnv struct {
	*env
	sidecar bool
}

// tmp is the container's /tmp: the image's on containerd, a directory
// of the test's own for a process pod (which sees the host's /tmp).
func (e *env) tmp() string {
	if e.process() {
		return e.hostDir()
	}
	return "/tmp"
}

// pod puts the probed container where the variant wants it: alone
// (busyBoxPodSpec, livenessPodSpec...) or as a restartable init
// container before a pause container (busyBoxSidecarPodSpec...).
func (pe probeEnv) pod(name string, c v1.Container) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"test": "liveness"}},
		Spec: v1.PodSpec{TerminationGracePeriodSeconds: ptr(int64(1))}}
	if pe.sidecar {
		p.Name = "sidecar-" + name
		c.RestartPolicy = ptr(v1.ContainerRestartPolicyAlways)
		p.Spec.InitContainers = []v1.Container{c}
		p.Spec.Containers = []v1.Container{{Name: "main", Command: pauseCommand}}
	} else {
		p.Spec.Containers = []v1.Container{c}
	}
	return p
}

// webserver is agnhost test-webserver: it serves "/" on port.
func webserver(dir string, port int) []string {
	return []string{"sh", "-c", fmt.Sprintf("mkdir -p %[1]s/www && echo ok > %[1]s/www/index.html && exec busybox httpd -f -p %[2]d -h %[1]s/www", dir, port)}
}

// redirectCGI answers /cgi-bin/redirect?loc=L with a 302 to L and the
// body Go's http.Redirect (agnhost) writes.
const redirectCGI = `#!/bin/sh
loc=$(busybox httpd -d "${QUERY_STRING#loc=}")
printf 'Status: 302 Found\r\nLocation: %s\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<a href="%s">Found</a>.\n\n' "$loc" "$loc"
`

// livenessServer is agnhost liveness: /healthz answers 200 for its first
// seconds and then fails; /cgi-bin/redirect redirects.
func livenessServer(dir string, port int) []string {
	return []string{"sh", "-c", fmt.Sprintf(`W=%s/www; mkdir -p $W/cgi-bin; echo ok > $W/healthz
cat > $W/cgi-bin/redirect <<'CGI'
%sCGI
chmod +x $W/cgi-bin/redirect
(sleep %d; rm -f $W/healthz) &
exec busybox httpd -f -p %d -h $W`, dir, redirectCGI, unhealthyAfter, port)}
}

// agnhostCommand runs the suite's agnhost: the built binary for a
// process pod, the image's /bin/agnhost on containerd.
func (e *env) agnhostCommand(args ...string) []string {
	if e.process() {
		return append([]string{agnhost}, args...)
	}
	return append([]string{"/bin/agnhost"}, args...)
}

// grpcServer is upstream's gRPCServerPodSpec command: agnhost
// grpc-health-checking, its gRPC port given, its control port any free
// one (upstream's 8080 on containerd).
func (e *env) grpcServer(port int) []string {
	return e.agnhostCommand("grpc-health-checking", "--port", fmt.Sprint(port), "--http-port", fmt.Sprint(e.port(8080)))
}

func execProbe(cmd ...string) v1.ProbeHandler {
	return v1.ProbeHandler{Exec: &v1.ExecAction{Command: cmd}}
}

func httpProbe(path string, port int) v1.ProbeHandler {
	return v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}}
}

// probedStatus is the status of the probed container (the first app
// container, or the sidecar).
func (pe probeEnv) probedStatus(p *v1.Pod) v1.ContainerStatus {
	if pe.sidecar {
		if len(p.Status.InitContainerStatuses) == 0 {
			return v1.ContainerStatus{}
		}
		return p.Status.InitContainerStatuses[0]
	}
	return status0(p)
}

// runLivenessTest is upstream's: wait until the container ran, then
// watch its restartCount never go down, until it has gone up by want
// (or, for want 0, that it stays put for the whole window).
func (pe probeEnv) runLivenessTest(p *v1.Pod, want int32, timeout time.Duration) {
	t := pe.t
	t.Helper()
	pe.create(p)
	pod := pe.waitPod(p.Name, statusTimeout, "the probed container not waiting", func(p *v1.Pod) bool {
		s := pe.probedStatus(p).State
		return s.Running != nil || s.Terminated != nil
	})
	initial := pe.probedStatus(pod).RestartCount
	deadline := time.Now().Add(timeout + time.Duration(initial*10)*time.Second)
	last, observed := initial, int32(0)
	for time.Now().Before(deadline) {
		pod = pe.get(p.Name)
		rc := pe.probedStatus(pod).RestartCount
		if rc < last {
			t.Fatalf("Restart count should increment monotonically: restart count of pod %s changed from %d to %d", p.Name, last, rc)
		}
		observed = rc - initial
		if want > 0 && observed >= want {
			break
		}
		last = rc
		time.Sleep(500 * time.Millisecond)
	}
	if (want == 0 && observed > 0) || (want > 0 && observed < want) {
		t.Fatalf("pod %s - expected number of restarts: %d, found restarts: %d within %v. Pod status: %s", p.Name, want, observed, timeout, describe(pod))
	}
}

func probeTests(t *testing.T, sidecar bool) {
	run := func(name string, f func(t *testing.T, pe probeEnv)) {
		t.Run(name, func(t *testing.T) {
			onBoth(t, func(t *testing.T, e *env) { f(t, probeEnv{e, sidecar}) })
		})
	}

	// "with readiness probe should not be ready before initial delay and never restart" (Conformance)
	run("withReadinessProbeShouldNotBeReadyBeforeInitialDelayAndNeverRestart", func(t *testing.T, pe probeEnv) {
		port := pe.port(80)
		p := pe.pod("readiness-initial-delay", v1.Container{Name: "test-webserver", Command: webserver(pe.tmp(), port),
			ReadinessProbe: &v1.Probe{ProbeHandler: httpProbe("/", port), InitialDelaySeconds: probeDelay}})
		pe.create(p)
		got := pe.waitPod(p.Name, statusTimeout, "the pod ready", podReady)
		if got.Status.Phase != v1.PodRunning {
			t.Fatalf("pod should be running and ready: %s", describe(got))
		}
		ready := condition(got, v1.PodReady).LastTransitionTime.Time
		st := pe.probedStatus(got).State.Running
		if st == nil {
			t.Fatalf("container is not running: %s", describe(got))
		}
		if ready.Sub(st.StartedAt.Time) < probeDelay*time.Second {
			t.Errorf("Pod became ready before its %ds initial delay (started %v, ready %v)", probeDelay, st.StartedAt.Time, ready)
		}
		if n := restarts(got); n != 0 {
			t.Errorf("pod should have a restart count of 0 but got %d", n)
		}
	})

	// "with readiness probe that fails should never be ready and never restart" (Conformance)
	run("withReadinessProbeThatFailsShouldNeverBeReadyAndNeverRestart", func(t *testing.T, pe probeEnv) {
		port := pe.port(80)
		p := pe.pod("readiness-fails", v1.Container{Name: "test-webserver", Command: webserver(pe.tmp(), port),
			ReadinessProbe: &v1.Probe{ProbeHandler: httpProbe("/", pe.port(81))}})
		pe.create(p)
		pe.consistently(p.Name, observationWindow, "pod should not be ready", func(p *v1.Pod) bool { return !podReady(p) })
		if n := restarts(pe.get(p.Name)); n != 0 {
			t.Errorf("pod should have a restart count of 0 but got %d", n)
		}
	})

	// "should be restarted with a exec \"cat /tmp/health\" liveness probe" (Conformance)
	run("shouldBeRestartedWithAExecCatTmpHealthLivenessProbe", func(t *testing.T, pe probeEnv) {
		tmp := pe.tmp()
		pe.runLivenessTest(pe.pod("liveness-exec", v1.Container{Name: "busybox",
			Command:       []string{"/bin/sh", "-c", fmt.Sprintf("echo ok >%[1]s/health; sleep %[2]d; rm -rf %[1]s/health; sleep 600", tmp, unhealthyAfter)},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("cat", tmp+"/health"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1}}),
			1, restartObservation)
	})

	// "should *not* be restarted with a exec \"cat /tmp/health\" liveness probe" (Conformance)
	run("shouldNotBeRestartedWithAExecCatTmpHealthLivenessProbe", func(t *testing.T, pe probeEnv) {
		tmp := pe.tmp()
		pe.runLivenessTest(pe.pod("liveness-exec-ok", v1.Container{Name: "busybox",
			Command:       []string{"/bin/sh", "-c", fmt.Sprintf("echo ok >%s/health; sleep 600", tmp)},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("cat", tmp+"/health"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1}}),
			0, observationWindow)
	})

	// "should be restarted with a /healthz http liveness probe" (Conformance)
	run("shouldBeRestartedWithAHealthzHttpLivenessProbe", func(t *testing.T, pe probeEnv) {
		port := pe.port(8080)
		pe.runLivenessTest(pe.pod("liveness-http", v1.Container{Name: "agnhost-container", Command: livenessServer(pe.tmp(), port),
			LivenessProbe: &v1.Probe{ProbeHandler: httpProbe("/healthz", port), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, FailureThreshold: 1}}),
			1, restartObservation)
	})

	// "should *not* be restarted with a tcp:8080 liveness probe" (Conformance)
	run("shouldNotBeRestartedWithATcp8080LivenessProbe", func(t *testing.T, pe probeEnv) {
		port := pe.port(8080)
		pe.runLivenessTest(pe.pod("liveness-tcp", v1.Container{Name: "agnhost-container", Command: livenessServer(pe.tmp(), port),
			LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{TCPSocket: &v1.TCPSocketAction{Port: intstr.FromInt32(int32(port))}},
				InitialDelaySeconds: quietProbeDelay, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1}}),
			0, observationWindow)
	})

	// "should have monotonically increasing restart count" (Conformance)
	run("shouldHaveMonotonicallyIncreasingRestartCount", func(t *testing.T, pe probeEnv) {
		port := pe.port(8080)
		pe.runLivenessTest(pe.pod("liveness-monotonic", v1.Container{Name: "agnhost-container", Command: livenessServer(pe.tmp(), port),
			LivenessProbe: &v1.Probe{ProbeHandler: httpProbe("/healthz", port), InitialDelaySeconds: 1, PeriodSeconds: 1, FailureThreshold: 1}}),
			5, 2*restartObservation)
	})

	// "should *not* be restarted with a /healthz http liveness probe" (Conformance)
	run("shouldNotBeRestartedWithAHealthzHttpLivenessProbe", func(t *testing.T, pe probeEnv) {
		port := pe.port(80)
		pe.runLivenessTest(pe.pod("liveness-http-ok", v1.Container{Name: "test-webserver", Command: webserver(pe.tmp(), port),
			LivenessProbe: &v1.Probe{ProbeHandler: httpProbe("/", port), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 5}}),
			0, observationWindow)
	})

	// "should be restarted with an exec liveness probe with timeout [MinimumKubeletVersion:1.20]"
	run("shouldBeRestartedWithAnExecLivenessProbeWithTimeout", func(t *testing.T, pe probeEnv) {
		pe.runLivenessTest(pe.pod("liveness-exec-timeout", v1.Container{Name: "busybox", Command: []string{"/bin/sh", "-c", "sleep 600"},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/sh", "-c", "sleep 10"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1}}),
			1, restartObservation)
	})

	// "should not be ready with an exec readiness probe timeout [MinimumKubeletVersion:1.20]"
	run("shouldNotBeReadyWithAnExecReadinessProbeTimeout", func(t *testing.T, pe probeEnv) {
		p := pe.pod("readiness-exec-timeout", v1.Container{Name: "busybox", Command: []string{"/bin/sh", "-c", "sleep 600"},
			ReadinessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/sh", "-c", "sleep 10"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1}})
		pe.create(p)
		if !pe.sidecar {
			pe.waitPod(p.Name, statusTimeout, "the pod not pending", func(p *v1.Pod) bool { return p.Status.Phase != v1.PodPending })
		}
		pe.consistently(p.Name, observationWindow, "expected to be not ready", func(p *v1.Pod) bool { return !podReady(p) })
	})

	// "should be restarted with a failing exec liveness probe that took longer than the timeout"
	run("shouldBeRestartedWithAFailingExecLivenessProbeThatTookLongerThanTheTimeout", func(t *testing.T, pe probeEnv) {
		pe.runLivenessTest(pe.pod("liveness-exec-fail-timeout", v1.Container{Name: "busybox", Command: []string{"/bin/sh", "-c", "sleep 600"},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/sh", "-c", "sleep 10 & exit 1"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 1, FailureThreshold: 1}}),
			1, restartObservation)
	})

	// "should be restarted with a local redirect http liveness probe"
	run("shouldBeRestartedWithALocalRedirectHttpLivenessProbe", func(t *testing.T, pe probeEnv) {
		port := pe.port(8080)
		pe.runLivenessTest(pe.pod("liveness-local-redirect", v1.Container{Name: "agnhost-container", Command: livenessServer(pe.tmp(), port),
			LivenessProbe: &v1.Probe{ProbeHandler: httpProbe("/cgi-bin/redirect?loc="+url.QueryEscape("/healthz"), port), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, FailureThreshold: 1}}),
			1, restartObservation)
	})

	// "should *not* be restarted with a non-local redirect http liveness probe"
	run("shouldNotBeRestartedWithANonLocalRedirectHttpLivenessProbe", func(t *testing.T, pe probeEnv) {
		port := pe.port(8080)
		p := pe.pod("liveness-nonlocal-redirect", v1.Container{Name: "agnhost-container", Command: livenessServer(pe.tmp(), port),
			LivenessProbe: &v1.Probe{ProbeHandler: httpProbe("/cgi-bin/redirect?loc="+url.QueryEscape("http://0.0.0.0/"), port), InitialDelaySeconds: quietProbeDelay, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1}})
		pe.runLivenessTest(p, 0, observationWindow)
		// Expect an event of type "ProbeWarning".
		const want = `Probe terminated redirects, Response body: <a href="http://0.0.0.0/">Found</a>.`
		evs := pe.events(pe.get(p.Name))
		found := false
		for _, ev := range evs {
			found = found || (ev.Reason == "ProbeWarning" && strings.Contains(ev.Message, want))
		}
		if !found {
			t.Errorf("no ProbeWarning event with %q: %+v", want, evs)
		}
	})

	// "should be restarted startup probe fails"
	run("shouldBeRestartedStartupProbeFails", func(t *testing.T, pe probeEnv) {
		pe.runLivenessTest(pe.pod("startup-fails", v1.Container{Name: "busybox", Command: []string{"/bin/sh", "-c", "sleep 600"},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/true"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, FailureThreshold: 1},
			StartupProbe:  &v1.Probe{ProbeHandler: execProbe("/bin/false"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, FailureThreshold: 3}}),
			1, restartObservation)
	})

	// "should *not* be restarted by liveness probe because startup probe delays it"
	run("shouldNotBeRestartedByLivenessProbeBecauseStartupProbeDelaysIt", func(t *testing.T, pe probeEnv) {
		pe.runLivenessTest(pe.pod("startup-delays-liveness", v1.Container{Name: "busybox", Command: []string{"/bin/sh", "-c", "sleep 600"},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/false"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, FailureThreshold: 1},
			StartupProbe:  &v1.Probe{ProbeHandler: execProbe("/bin/false"), InitialDelaySeconds: probeDelay, FailureThreshold: 60}}),
			0, observationWindow)
	})

	// "should be restarted by liveness probe after startup probe enables it"
	run("shouldBeRestartedByLivenessProbeAfterStartupProbeEnablesIt", func(t *testing.T, pe probeEnv) {
		tmp := pe.tmp()
		pe.runLivenessTest(pe.pod("startup-enables-liveness", v1.Container{Name: "busybox",
			Command:       []string{"/bin/sh", "-c", fmt.Sprintf("sleep %d; echo ok >%s/startup; sleep 600", unhealthyAfter, tmp)},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/false"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, FailureThreshold: 1},
			StartupProbe:  &v1.Probe{ProbeHandler: execProbe("cat", tmp+"/startup"), InitialDelaySeconds: probeDelay, PeriodSeconds: 1, FailureThreshold: 60}}),
			1, restartObservation)
	})

	// "should be ready immediately after startupProbe succeeds" (upstream's
	// timings kept: the readiness period must outlast the wait)
	run("shouldBeReadyImmediatelyAfterStartupProbeSucceeds", func(t *testing.T, pe probeEnv) {
		tmp := pe.tmp()
		p := pe.pod("startup-then-ready", v1.Container{Name: "busybox",
			Command:        []string{"/bin/sh", "-c", fmt.Sprintf("echo ok >%[1]s/health; sleep 32; echo ok >%[1]s/startup; sleep 600", tmp)},
			ReadinessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/cat", tmp+"/health"), PeriodSeconds: 30},
			StartupProbe:   &v1.Probe{ProbeHandler: execProbe("/bin/cat", tmp+"/startup"), FailureThreshold: 120, PeriodSeconds: 5}})
		pe.create(p)
		pe.waitPod(p.Name, statusTimeout, "the container started", func(p *v1.Pod) bool {
			s := pe.probedStatus(p)
			return s.Started != nil && *s.Started
		})
		started := time.Now()
		got := pe.waitPod(p.Name, statusTimeout, "the pod ready", podReady)
		readyIn := time.Since(started)
		if got.Status.Phase != v1.PodRunning {
			t.Fatalf("pod should be running and ready: %s", describe(got))
		}
		if readyIn > 25*time.Second {
			t.Errorf("Pod became ready in %v, more than 25s after startupProbe succeeded. It means that the delay readiness probes were not initiated immediately after startup finished.", readyIn)
		}
	})

	// "should mark readiness on pods to false while pod is in progress of terminating when a pod has a readiness probe"
	run("shouldMarkReadinessOnPodsToFalseWhilePodIsInProgressOfTerminating", func(t *testing.T, pe probeEnv) {
		tmp := pe.tmp()
		p := pe.pod("probe-test-terminating", v1.Container{Name: "probe-test", Command: []string{"/bin/sh", "-c", terminatingScript(tmp, 8)},
			ReadinessProbe: &v1.Probe{ProbeHandler: execProbe("cat", tmp+"/ready"), FailureThreshold: 1, InitialDelaySeconds: probeDelay, PeriodSeconds: 2}})
		p.Spec.TerminationGracePeriodSeconds = ptr(int64(30))
		pe.create(p)
		pe.waitPod(p.Name, statusTimeout, "the pod running and ready", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning && podReady(p) })
		if err := removeManifest(pe.env, p.Name); err != nil {
			t.Fatal(err)
		}
		pe.waitPod(p.Name, 30*time.Second, "the terminating pod not ready", func(p *v1.Pod) bool { return !podReady(p) })
		pe.waitGone(p.Name, 60*time.Second)
	})

	// "should mark readiness on pods to false and disable liveness probes while pod is in progress of terminating"
	run("shouldMarkReadinessOnPodsToFalseAndDisableLivenessProbesWhilePodIsInProgressOfTerminating", func(t *testing.T, pe probeEnv) {
		tmp := pe.tmp()
		p := pe.pod("probe-test-terminating-liveness", v1.Container{Name: "probe-test", Command: []string{"/bin/sh", "-c", terminatingScript(tmp, 12)},
			ReadinessProbe: &v1.Probe{ProbeHandler: execProbe("cat", tmp+"/ready"), FailureThreshold: 1, InitialDelaySeconds: probeDelay, PeriodSeconds: 2},
			LivenessProbe:  &v1.Probe{ProbeHandler: execProbe("cat", tmp+"/liveness"), FailureThreshold: 1, InitialDelaySeconds: probeDelay, PeriodSeconds: 1}})
		p.Spec.TerminationGracePeriodSeconds = ptr(int64(30))
		pe.create(p)
		pe.waitPod(p.Name, statusTimeout, "the pod running and ready", func(p *v1.Pod) bool { return p.Status.Phase == v1.PodRunning && podReady(p) })
		deleted := time.Now()
		if err := removeManifest(pe.env, p.Name); err != nil {
			t.Fatal(err)
		}
		pod := pe.waitPod(p.Name, 30*time.Second, "the terminating pod not ready", func(p *v1.Pod) bool { return !podReady(p) })
		// Verify there are zero liveness failures since they are turned
		// off during pod termination (while the pod still terminates).
		// Only failures from the deletion on count: a 1s exec probe can
		// time out on a loaded 2-core CI machine before it, which says
		// nothing of termination.
		for end := time.Now().Add(8 * time.Second); time.Now().Before(end); time.Sleep(500 * time.Millisecond) {
			for _, ev := range pe.events(pod) {
				if strings.Contains(ev.Message, "failed liveness probe") && !ev.LastTime.Before(deleted) {
					t.Fatalf("should not see liveness probe failures: %+v", ev)
				}
			}
		}
		pe.waitGone(p.Name, 60*time.Second)
	})

	// "should *not* be restarted with a GRPC liveness probe" (Conformance):
	// agnhost grpc-health-checking (google.golang.org/grpc's health
	// server) answers SERVING on the probed port.
	run("shouldNotBeRestartedWithAGRPCLivenessProbe", func(t *testing.T, pe probeEnv) {
		port := pe.port(5000)
		pe.runLivenessTest(pe.pod("test-grpc-serving", v1.Container{Name: "agnhost", Command: pe.grpcServer(port),
			Ports: []v1.ContainerPort{{ContainerPort: int32(port)}},
			LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(port)}},
				InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1}}),
			0, observationWindow)
	})

	// "should be restarted with a GRPC liveness probe" (Conformance): the
	// same server, but the probe's port is wrong (upstream's 2333).
	run("shouldBeRestartedWithAGRPCLivenessProbe", func(t *testing.T, pe probeEnv) {
		port := pe.port(5000)
		pe.runLivenessTest(pe.pod("test-grpc", v1.Container{Name: "agnhost", Command: pe.grpcServer(port),
			Ports: []v1.ContainerPort{{ContainerPort: int32(port)}},
			LivenessProbe: &v1.Probe{ProbeHandler: v1.ProbeHandler{GRPC: &v1.GRPCAction{Port: int32(pe.port(2333))}},
				InitialDelaySeconds: probeDelay, PeriodSeconds: 1, TimeoutSeconds: 5, FailureThreshold: 1}}),
			1, restartObservation)
	})

	if sidecar {
		return
	}

	// "should override timeoutGracePeriodSeconds when LivenessProbe field is set"
	run("shouldOverrideTimeoutGracePeriodSecondsWhenLivenessProbeFieldIsSet", func(t *testing.T, pe probeEnv) {
		// The container ignores SIGTERM, as upstream's busybox sleep
		// does as PID 1: only the probe's 5 s grace can end it in time.
		p := pe.pod("liveness-probe-grace", v1.Container{Name: "busybox", Command: []string{"/bin/sh", "-c", "trap '' TERM; sleep 1000"},
			LivenessProbe: &v1.Probe{ProbeHandler: httpProbe("/healthz", pe.port(8080)), InitialDelaySeconds: 10, FailureThreshold: 1,
				TerminationGracePeriodSeconds: ptr(int64(5))}})
		p.Spec.TerminationGracePeriodSeconds = ptr(int64(500))
		// 10s delay + 10s period + 5s grace period = 25s < 40s << pod-level timeout 500
		pe.runLivenessTest(p, 1, 40*time.Second)
	})

	// "should override timeoutGracePeriodSeconds when StartupProbe field is set"
	run("shouldOverrideTimeoutGracePeriodSecondsWhenStartupProbeFieldIsSet", func(t *testing.T, pe probeEnv) {
		p := pe.pod("startup-probe-grace", v1.Container{Name: "busybox", Command: []string{"/bin/sh", "-c", "trap '' TERM; sleep 1000"},
			LivenessProbe: &v1.Probe{ProbeHandler: execProbe("/bin/true"), InitialDelaySeconds: 15, FailureThreshold: 1},
			StartupProbe: &v1.Probe{ProbeHandler: execProbe("/bin/cat", pe.tmp()+"/startup"), InitialDelaySeconds: 10, FailureThreshold: 1,
				TerminationGracePeriodSeconds: ptr(int64(5))}})
		p.Spec.TerminationGracePeriodSeconds = ptr(int64(500))
		pe.runLivenessTest(p, 1, 40*time.Second)
	})
}

// terminatingScript is upstream's: ready (and live) until SIGTERM, then
// not, for the given seconds before it exits. Upstream sleeps 10 s
// between its lines (which delays the trap); here 1 s.
func terminatingScript(tmp string, termSeconds int) string {
	return fmt.Sprintf(`
_term() {
	rm -f %[1]s/ready
	rm -f %[1]s/liveness
	sleep %[2]d
	exit 0
}
trap _term TERM
touch %[1]s/ready
touch %[1]s/liveness
while true; do
  echo "hello"
  sleep 1
done
`, tmp, termSeconds)
}

func restarts(p *v1.Pod) int {
	n := 0
	for _, s := range append(append([]v1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
		n += int(s.RestartCount)
	}
	return n
}

// "Probing container ..."
func TestProbingContainer(t *testing.T) {
	t.Parallel()
	probeTests(t, false)
}

// "Probing restartable init container ..."
func TestProbingRestartableInitContainer(t *testing.T) {
	t.Parallel()
	probeTests(t, true)
}
