package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// These tests drive the real daemon with process pods and assert the
// values the kubelet shows where the behaviour crosses the I/O shell
// (issue 13).

// A startup probe that keeps failing kills the container once its failure
// threshold is reached, with the probe's own terminationGracePeriodSeconds
// (1s, floored at the 2s minimum) instead of the pod's 30s: the container
// ignores SIGTERM, so only the probe's grace lets it end in seconds.
func TestFailingStartupProbeKillsWithTheProbesGrace(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("startup.yaml", `apiVersion: v1
kind: Pod
metadata: {name: startup}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 30
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "trap '' TERM; while :; do sleep 1; done"]
    startupProbe:
      exec: {command: ["sh", "-c", "exit 1"]}
      periodSeconds: 1
      failureThreshold: 3
      terminationGracePeriodSeconds: 1
`)
	p := d.waitPod("startup", 20*time.Second, func(p *v1.Pod) bool {
		return p.Status.ContainerStatuses[0].LastTerminationState.Terminated != nil
	})
	cs := p.Status.ContainerStatuses[0]
	lt := cs.LastTerminationState.Terminated
	if lt.ExitCode != 137 {
		t.Fatalf("the killed instance: lastState %+v, want exit 137 (SIGKILL after the probe's grace)", lt)
	}
	// Three failures a second apart, then at most the 2s minimum grace:
	// far less than the pod's 30s.
	if ran := lt.FinishedAt.Sub(lt.StartedAt.Time); ran > 15*time.Second {
		t.Fatalf("the killed instance ran %s, want the probe's grace, not the pod's 30s", ran)
	}
	if cs.Started == nil || *cs.Started {
		t.Fatalf("started = %v while the startup probe fails, want false", cs.Started)
	}
	out, _, _ := d.cli("describe", "pod", "startup")
	for _, want := range []string{"Startup probe failed", "Container app failed startup probe, will be restarted"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}
}

// A container its runtime cannot create (a kubeadm static pod on a device
// without containerd) never ran: it waits with CreateContainerError and the
// message, is retried with backoff, keeps restartCount 0 and an empty
// lastState, and the pod stays Pending, as with the kubelet.
func TestNeverCreatedContainerCountsNoRestarts(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("backoff: {initial: 1s, max: 1s}\n")
	d.start()
	d.write("etcd.yaml", `apiVersion: v1
kind: Pod
metadata: {name: etcd, namespace: kube-system}
spec:
  containers:
  - name: etcd
    image: registry.k8s.io/etcd:3.5.15-0
    command: ["etcd"]
`)
	// Two attempts at least: the retry after the backoff counts nothing either.
	waitForLong(t, 15*time.Second, "two 'Error: containerd is not configured' events in describe pod etcd", func() bool {
		out, _, _ := d.cli("describe", "pod", "-n", "kube-system", "etcd")
		return strings.Count(out, "Error: containerd is not configured") >= 2
	})
	p := d.waitPod("etcd", 5*time.Second, func(p *v1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "CreateContainerError"
	})
	cs := p.Status.ContainerStatuses[0]
	if cs.RestartCount != 0 || cs.LastTerminationState.Terminated != nil || cs.ContainerID != "" {
		t.Fatalf("never-created container: restartCount %d lastState %+v containerID %q, want 0, empty, empty",
			cs.RestartCount, cs.LastTerminationState, cs.ContainerID)
	}
	if !strings.Contains(cs.State.Waiting.Message, "containerd") {
		t.Fatalf("waiting message %q does not say why", cs.State.Waiting.Message)
	}
	if p.Status.Phase != v1.PodPending {
		t.Fatalf("phase %s, want Pending", p.Status.Phase)
	}
	out, _, _ := d.cli("get", "pods", "-n", "kube-system")
	if !regexp.MustCompile(`etcd\s+0/1\s+CreateContainerError\s+0\s`).MatchString(out) {
		t.Fatalf("get pods, want etcd 0/1 CreateContainerError 0:\n%s", out)
	}
}

// While an exec postStart hook runs the container is shown waiting
// (ContainerCreating), not running, and the hook is not cut off at the
// pod's terminationGracePeriodSeconds (1s here): the kubelet sets no
// timeout on exec hooks.
func TestPostStartExecHookWaitsWithoutTimeout(t *testing.T) {
	d := newDaemon(t)
	d.start()
	hookRan := filepath.Join(d.dir, "hook-ran")
	release := filepath.Join(d.dir, "release")
	d.write("poststart.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: poststart}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: host
    command: ["sleep", "1000"]
    lifecycle:
      postStart:
        exec: {command: ["sh", "-c", "touch %s; while [ ! -e %s ]; do sleep 0.05; done"]}
`, hookRan, release))
	waitForLong(t, 10*time.Second, "the postStart hook to start", func() bool { return exists(hookRan) })
	waiting := func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating" &&
			cs.Started != nil && !*cs.Started && p.Status.Phase == v1.PodPending
	}
	d.waitPod("poststart", 5*time.Second, waiting)
	// Past the pod's grace period (1s) the hook must still be running and
	// the container still waiting: a wait for something not to happen.
	time.Sleep(2500 * time.Millisecond)
	if p := d.waitPod("poststart", time.Second, func(*v1.Pod) bool { return true }); !waiting(p) {
		t.Fatalf("2.5s into the postStart hook, want the container still waiting: %s", describePod(p))
	}
	if out, _, _ := d.cli("describe", "pod", "poststart"); strings.Contains(out, "FailedPostStartHook") {
		t.Fatalf("the hook was cut off:\n%s", out)
	}
	writeFile(t, release)
	p := d.waitPod("poststart", 10*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses[0]
		return cs.State.Running != nil && cs.Started != nil && *cs.Started
	})
	if cs := p.Status.ContainerStatuses[0]; cs.RestartCount != 0 || p.Status.Phase != v1.PodRunning {
		t.Fatalf("after the hook: %s", describePod(p))
	}

	// A hook that never returns ends with its container: no timeout must
	// not mean a process left behind.
	pidFile := filepath.Join(d.dir, "hook-pid")
	d.write("hanging.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: hanging}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: app
    image: host
    command: ["sleep", "1000"]
    lifecycle:
      postStart:
        exec: {command: ["sh", "-c", "echo $$ > %s.tmp && mv %s.tmp %s; exec sleep 1000"]}
`, pidFile, pidFile, pidFile))
	waitForLong(t, 10*time.Second, "the hanging postStart hook to write its pid", func() bool { return exists(pidFile) })
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	d.remove("hanging.yaml")
	d.waitGone("hanging", 15*time.Second)
	waitForLong(t, 5*time.Second, fmt.Sprintf("the hook process %d to end with its pod", pid), func() bool { return !alive(pid) })
}

// drain stops every pod and cordons the node (get node: Ready,
// SchedulingDisabled); uncordon runs the drained static pods again, as
// after a node shutdown and boot, and admits the ones that arrived meanwhile.
func TestUncordonRunsDrainedPodsAgain(t *testing.T) {
	d := newDaemon(t)
	d.withClasses("shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}]\n")
	d.start()
	d.write("web.yaml", processPod("web", "Always", 2, "exec sleep 1000"))
	first := d.waitPod("web", 10*time.Second, running)
	if out, errOut, code := d.cli("drain"); code != 0 {
		t.Fatalf("drain: %d %s %s", code, out, errOut)
	}
	drained := d.waitPod("web", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	if drained.Status.Reason != "Terminated" {
		t.Fatalf("drained pod: %s", describePod(drained))
	}
	out, _, _ := d.cli("get", "node")
	if !regexp.MustCompile(`\sReady,SchedulingDisabled\s`).MatchString(out) {
		t.Fatalf("get node while cordoned, want Ready,SchedulingDisabled:\n%s", out)
	}
	d.write("late.yaml", processPod("late", "Always", 2, "exec sleep 1000"))
	d.waitPod("late", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Reason == "NodeShutdown" })

	if _, errOut, code := d.cli("uncordon"); code != 0 {
		t.Fatalf("uncordon: %s", errOut)
	}
	p := d.waitPod("web", 10*time.Second, func(p *v1.Pod) bool { return running(p) && p.Status.Phase == v1.PodRunning })
	cs := p.Status.ContainerStatuses[0]
	if p.Status.Reason != "" || p.UID != first.UID || cs.RestartCount != 1 || cs.ContainerID == first.Status.ContainerStatuses[0].ContainerID {
		t.Fatalf("web after uncordon: reason %q uid %s (was %s) %s", p.Status.Reason, p.UID, first.UID, describePod(p))
	}
	d.waitPod("late", 10*time.Second, running)
	out, _, _ = d.cli("get", "node")
	if strings.Contains(out, "SchedulingDisabled") || !regexp.MustCompile(`\sReady\s`).MatchString(out) {
		t.Fatalf("get node after uncordon, want Ready:\n%s", out)
	}
}

// A daemon restarted after a drain forgets the drain, but not the pods it
// stopped: uncordon still runs them again.
func TestUncordonAfterADaemonRestart(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("web.yaml", processPod("web", "Always", 2, "exec sleep 1000"))
	d.waitPod("web", 10*time.Second, running)
	if out, errOut, code := d.cli("drain"); code != 0 {
		t.Fatalf("drain: %d %s %s", code, out, errOut)
	}
	d.waitPod("web", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	waitRecords(t, filepath.Join(d.data, "state.db"), `"failed":{"reason":"Terminated"`)
	d.stop(syscall.SIGTERM)
	d.start()
	if p := d.waitPod("web", 10*time.Second, func(*v1.Pod) bool { return true }); p.Status.Phase != v1.PodFailed {
		t.Fatalf("after the restart, before uncordon: %s", describePod(p))
	}
	if _, errOut, code := d.cli("uncordon"); code != 0 {
		t.Fatalf("uncordon after a restart: %s", errOut)
	}
	d.waitPod("web", 10*time.Second, func(p *v1.Pod) bool { return running(p) && p.Status.Phase == v1.PodRunning })
	if _, _, code := d.cli("uncordon"); code == 0 {
		t.Fatal("a second uncordon, with nothing drained, succeeded")
	}
}
