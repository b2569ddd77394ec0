package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/listenserver"
)

// sh quotes a script for a YAML flow sequence.
func sh(script string) string { return fmt.Sprintf("[\"sh\", \"-c\", %q]", script) }

func TestInitContainersAndSidecarsInOrder(t *testing.T) {
	d := newDaemon(t)
	d.start()
	f := filepath.Join(d.dir, "order")
	// first waits for release, so Init:0/3 lasts until get pods saw it.
	release := filepath.Join(d.dir, "release-first")
	// side's startup probe passes once it logged side-up: podvisor starts
	// second as soon as side has started, and without the probe that is
	// when its process runs, before its shell may have logged.
	sideUp := f + ".side-up"
	d.write("ordered.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: ordered}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 10
  initContainers:
  - {name: first, image: host, command: %s}
  - name: side
    image: host
    restartPolicy: Always
    command: %s
    startupProbe: {exec: {command: ["test", "-e", %q]}, periodSeconds: 1, failureThreshold: 30}
  - {name: second, image: host, command: %s}
  containers:
  - {name: app, image: host, command: %s}
`,
		sh("while [ ! -e "+release+" ]; do sleep 0.05; done; echo first >> "+f),
		sh("trap 'echo side-down >> "+f+"; exit 0' TERM; echo side-up >> "+f+"; touch "+sideUp+"; while true; do sleep 0.05; done"),
		sideUp,
		sh("echo second >> "+f),
		sh("trap 'sleep 0.3; echo app-down >> "+f+"; exit 0' TERM; echo app-up >> "+f+"; while true; do sleep 0.05; done")))
	waitFor(t, "get pods to show ordered at Init:0/3 while its first init container waits for "+release, func() bool {
		out, _, _ := d.cli("get", "pods")
		return strings.Contains(out, "Init:0/3")
	})
	writeFile(t, release)
	p := d.waitPod("ordered", 10*time.Second, func(p *v1.Pod) bool { return running(p) && p.Status.Phase == v1.PodRunning })
	waitFor(t, "four start events (init, sidecar, init, app)", func() bool { return len(readLines(f)) == 4 })
	if got := strings.Join(readLines(f), ","); got != "first,side-up,second,app-up" {
		t.Fatalf("start order %s", got)
	}
	if !initCond(p, v1.PodInitialized) {
		t.Fatalf("not initialized: %+v", p.Status.Conditions)
	}
	out, _, _ := d.cli("get", "pods")
	if !strings.Contains(out, "2/2") { // the sidecar counts toward READY
		t.Fatalf("get pods:\n%s", out)
	}
	d.remove("ordered.yaml")
	d.waitGone("ordered", 15*time.Second)
	if got := strings.Join(readLines(f), ","); got != "first,side-up,second,app-up,app-down,side-down" {
		t.Fatalf("the sidecar must stop after the app: %s", got)
	}
}

func initCond(p *v1.Pod, typ v1.PodConditionType) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == typ {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

func TestFailingInitContainerStatus(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("backoff: {initial: 1s, max: 1s}\n")
	d.start()
	d.write("initfail.yaml", `apiVersion: v1
kind: Pod
metadata: {name: initfail}
spec:
  runtimeClassName: process
  initContainers:
  - {name: check, image: host, command: ["sh", "-c", "exit 2"]}
  containers:
  - {name: app, image: host, command: ["sleep", "100"]}
`)
	d.write("initnever.yaml", `apiVersion: v1
kind: Pod
metadata: {name: initnever}
spec:
  runtimeClassName: process
  restartPolicy: Never
  initContainers:
  - {name: check, image: host, command: ["sh", "-c", "exit 2"]}
  containers:
  - {name: app, image: host, command: ["sleep", "100"]}
`)
	d.waitPod("initfail", 10*time.Second, func(p *v1.Pod) bool {
		return len(p.Status.InitContainerStatuses) == 1 && p.Status.InitContainerStatuses[0].RestartCount >= 2
	})
	waitFor(t, "get pods to show Init:CrashLoopBackOff or Init:Error", func() bool {
		out, _, _ := d.cli("get", "pods")
		return strings.Contains(out, "Init:CrashLoopBackOff") || strings.Contains(out, "Init:Error")
	})
	p := d.waitPod("initnever", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if p.Status.ContainerStatuses[0].State.Waiting == nil || p.Status.InitContainerStatuses[0].RestartCount != 0 {
		t.Fatalf("under Never the app must not start nor the init retry: %s", describePod(p))
	}
	// The kubelet sets no pod reason for it; kubectl shows the init
	// container's own.
	if p.Status.Reason != "" || p.Status.Message != "" {
		t.Fatalf("failed init under Never: reason %q message %q, want none", p.Status.Reason, p.Status.Message)
	}
	if out, _, _ := d.cli("get", "pods"); !regexp.MustCompile(`initnever\s+0/1\s+Init:Error\s`).MatchString(out) {
		t.Fatalf("get pods, want initnever Init:Error:\n%s", out)
	}
}

func TestHooks(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/prestop" {
			hits.Add(1)
		}
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	d := newDaemon(t)
	d.start()
	f := filepath.Join(d.dir, "hooks")
	d.write("hooked.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hooked}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 10
  containers:
  - name: app
    image: host
    command: %s
    lifecycle:
      postStart: {exec: {command: %s}}
      preStop: {exec: {command: %s}}
  - name: web
    image: host
    command: %s
    lifecycle:
      preStop: {httpGet: {path: /prestop, port: %d}}
`,
		sh("trap 'echo app-term >> "+f+"; exit 0' TERM; echo app-up >> "+f+"; while true; do sleep 0.05; done"),
		sh("echo post-start >> "+f),
		sh("echo pre-stop >> "+f+"; sleep 0.3"),
		sh("trap 'exit 0' TERM; while true; do sleep 0.05; done"), port))
	d.waitPod("hooked", 10*time.Second, func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 2 && p.Status.ContainerStatuses[0].Ready && p.Status.ContainerStatuses[1].Ready
	})
	d.remove("hooked.yaml")
	d.waitGone("hooked", 15*time.Second)
	// postStart runs beside the container's own start, in no guaranteed
	// order with it (as in Kubernetes); preStop comes before SIGTERM.
	lines := readLines(f)
	if len(lines) != 4 || !sameSet(lines[:2], "app-up", "post-start") || lines[2] != "pre-stop" || lines[3] != "app-term" {
		t.Fatalf("hook order: %v", lines)
	}
	if hits.Load() != 1 {
		t.Fatalf("httpGet preStop hit %d times", hits.Load())
	}
}

func TestFailedPostStartKillsTheContainer(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("badhook.yaml", `apiVersion: v1
kind: Pod
metadata: {name: badhook}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: host
    command: ["sleep", "100"]
    lifecycle:
      postStart: {exec: {command: ["sh", "-c", "exit 1"]}}
`)
	d.waitPod("badhook", 10*time.Second, func(p *v1.Pod) bool { return p.Status.ContainerStatuses[0].RestartCount >= 1 })
	out, _, _ := d.cli("describe", "pod", "badhook")
	if !strings.Contains(out, "FailedPostStartHook") {
		t.Fatalf("describe:\n%s", out)
	}
}

// probedPod runs a long-lived process with the given probe YAML lines.
func probedPod(name, probes string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: host
    command: ["sleep", "1000"]
%s`, name, probes)
}

func TestProbeHandlersDriveReadinessAndRestarts(t *testing.T) {
	var healthy atomic.Bool
	healthy.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !healthy.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	httpPort := srv.Listener.Addr().(*net.TCPAddr).Port
	tcp, _ := net.Listen("tcp", "127.0.0.1:0")
	defer tcp.Close()
	go listenserver.AcceptAndClose(tcp)
	glis, _ := net.Listen("tcp", "127.0.0.1:0")
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(glis)
	defer gs.Stop()

	d := newDaemon(t)
	d.withConfig("backoff: {initial: 1s, max: 1s}\n")
	d.start()
	marker := filepath.Join(d.dir, "ready-flag")
	d.write("exec.yaml", probedPod("exec", fmt.Sprintf("    readinessProbe: {exec: {command: [\"test\", \"-e\", %q]}, periodSeconds: 1}\n", marker)))
	d.write("http.yaml", probedPod("http", fmt.Sprintf("    readinessProbe: {httpGet: {path: /, port: %d}, periodSeconds: 1}\n", httpPort)))
	d.write("tcp.yaml", probedPod("tcp", fmt.Sprintf("    readinessProbe: {tcpSocket: {port: %d}, periodSeconds: 1}\n", tcp.Addr().(*net.TCPAddr).Port)))
	d.write("grpc.yaml", probedPod("grpc", fmt.Sprintf("    readinessProbe: {grpc: {port: %d}, periodSeconds: 1}\n", glis.Addr().(*net.TCPAddr).Port)))
	ready := func(p *v1.Pod) bool { return initCond(p, v1.PodReady) }
	for _, name := range []string{"http", "tcp", "grpc"} {
		d.waitPod(name, 10*time.Second, ready)
	}
	if p := d.waitPod("exec", 5*time.Second, running); ready(p) {
		t.Fatal("exec readiness passed without its file")
	}
	writeFile(t, marker)
	d.waitPod("exec", 10*time.Second, ready)
	healthy.Store(false)
	d.waitPod("http", 10*time.Second, func(p *v1.Pod) bool { return !ready(p) })

	// Liveness: an HTTP endpoint that fails kills and restarts the container.
	d.write("live.yaml", probedPod("live", fmt.Sprintf("    livenessProbe: {httpGet: {path: /, port: %d}, periodSeconds: 1, failureThreshold: 2}\n", httpPort)))
	p := d.waitPod("live", 15*time.Second, func(p *v1.Pod) bool { return p.Status.ContainerStatuses[0].RestartCount >= 1 })
	if lt := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; lt == nil || lt.ExitCode != 143 {
		t.Fatalf("liveness kill: %s", describePod(p))
	}
	out, _, _ := d.cli("describe", "pod", "live")
	if !strings.Contains(out, "Liveness probe failed") {
		t.Fatalf("describe lacks the probe event:\n%s", out)
	}
}

func TestStartupProbeGatesReadiness(t *testing.T) {
	d := newDaemon(t)
	d.start()
	started := filepath.Join(d.dir, "started")
	d.write("slow.yaml", probedPod("slow", fmt.Sprintf(`    startupProbe: {exec: {command: ["test", "-e", %q]}, periodSeconds: 1, failureThreshold: 30}
    readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
`, started)))
	d.waitPod("slow", 5*time.Second, running)
	time.Sleep(1500 * time.Millisecond) // a second and a half of failing startup probes
	p := d.waitPod("slow", time.Second, running)
	if cs := p.Status.ContainerStatuses[0]; *cs.Started || cs.Ready {
		t.Fatalf("ready before the startup probe passed: %+v", cs)
	}
	writeFile(t, started)
	p = d.waitPod("slow", 10*time.Second, func(p *v1.Pod) bool { return p.Status.ContainerStatuses[0].Ready })
	if !*p.Status.ContainerStatuses[0].Started {
		t.Fatal("ready but not started")
	}
}

func TestActiveDeadlineFailsThePod(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("deadline.yaml", `apiVersion: v1
kind: Pod
metadata: {name: deadline}
spec:
  runtimeClassName: process
  activeDeadlineSeconds: 1
  terminationGracePeriodSeconds: 2
  containers:
  - {name: app, image: host, command: ["sleep", "100"]}
`)
	p := d.waitPod("deadline", 10*time.Second, func(p *v1.Pod) bool {
		return p.Status.Phase == v1.PodFailed && p.Status.ContainerStatuses[0].State.Terminated != nil
	})
	if p.Status.Reason != "DeadlineExceeded" {
		t.Fatalf("reason = %q", p.Status.Reason)
	}
	out, _, _ := d.cli("get", "pods")
	if !strings.Contains(out, "DeadlineExceeded") {
		t.Fatalf("get pods:\n%s", out)
	}
}

func TestDeleteWithGracePeriodAndForce(t *testing.T) {
	d := newDaemon(t)
	d.start()
	ready := filepath.Join(d.dir, "trap-set")
	d.write("stubborn.yaml", processPod("stubborn", "Always", 30, "trap '' TERM; touch "+ready+"; while true; do sleep 0.05; done"))
	first := d.waitPod("stubborn", 10*time.Second, running)
	waitFor(t, "the workload to set its TERM trap", func() bool { return exists(ready) }) // a SIGTERM before the trap would end it
	begin := time.Now()
	_, errOut, code := d.cli("delete", "pod", "stubborn", "--grace-period", "3")
	if code != 0 || !strings.Contains(errOut, "starts again") {
		t.Fatalf("delete: %d %q", code, errOut)
	}
	second := d.waitPod("stubborn", 10*time.Second, func(p *v1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].ContainerID != first.Status.ContainerStatuses[0].ContainerID
	})
	took := time.Since(begin)
	if took < 3*time.Second {
		t.Fatalf("--grace-period 3 on a 30s pod took %v", took)
	}
	// Within the 10 s wait, so not the pod's 30 s: the 3 s ran out and
	// SIGKILL ended the copy that ignores SIGTERM. How soon is a figure.
	waitGraceKills(t, d, "stubborn", 1)
	t.Logf("--grace-period 3 on a 30s pod: replaced after %v", took)
	begin = time.Now()
	_, errOut, code = d.cli("delete", "pod", "stubborn", "--grace-period", "0", "--force")
	if code != 0 || !strings.Contains(errOut, "at most one copy") {
		t.Fatalf("force delete: %d %q", code, errOut)
	}
	d.waitPod("stubborn", 10*time.Second, func(p *v1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].ContainerID != second.Status.ContainerStatuses[0].ContainerID
	})
	// Forced: SIGKILL at once, with no stop signal whose grace (at
	// least lifecycle's MinGracePeriod) runs out first. Once the third
	// copy's start is in the log, the forced kill is too.
	t.Logf("force delete: replaced after %v", time.Since(begin))
	waitForValue(t, 10*time.Second, "the third start of stubborn in the daemon's log", func() int {
		return strings.Count(d.log.String(), `msg="Started container main" pod=default/stubborn `)
	}, func(n int) bool { return n == 3 })
	waitGraceKills(t, d, "stubborn", 1)
	if _, errOut, code := d.cli("delete", "pod", "stubborn", "--force"); code == 0 || !strings.Contains(errOut, "--grace-period 0") {
		t.Fatalf("--force alone: %d %q", code, errOut)
	}
}

func TestReadinessGateThroughTheAPI(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("gated.yaml", `apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  runtimeClassName: process
  readinessGates: [{conditionType: example.com/registered}]
  containers:
  - {name: app, image: host, command: ["sleep", "100"]}
`)
	p := d.waitPod("gated", 10*time.Second, running)
	if initCond(p, v1.PodReady) || !initCond(p, v1.ContainersReady) {
		t.Fatalf("conditions: %+v", p.Status.Conditions)
	}
	if err := d.client.SetCondition(context.Background(), "default", "gated", "example.com/registered", true); err != nil {
		t.Fatal(err)
	}
	d.waitPod("gated", 5*time.Second, func(p *v1.Pod) bool { return initCond(p, v1.PodReady) })
	if err := d.client.SetCondition(context.Background(), "default", "gated", "example.com/other", true); err == nil {
		t.Fatal("a condition that is no gate of the pod was accepted")
	}
}

func writeFile(t *testing.T, path string) {
	if err := writeString(path, "x"); err != nil {
		t.Fatal(err)
	}
}

func sameSet(got []string, want ...string) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[string]int{}
	for _, g := range got {
		seen[g]++
	}
	for _, w := range want {
		if seen[w] == 0 {
			return false
		}
		seen[w]--
	}
	return true
}
