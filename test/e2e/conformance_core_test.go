package e2e

import (
	"strings"
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
