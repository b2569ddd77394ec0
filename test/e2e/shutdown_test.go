package e2e

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// drainPod records when it got SIGTERM, then takes 300ms to stop. It
// touches marks.<name> once its trap is set: a SIGTERM before that would
// kill the shell unrecorded.
func drainPod(name, class, marks string) string {
	spec := processPod(name, "Always", 5, "trap 'echo "+name+" >> "+marks+"; sleep 0.3; exit 0' TERM; touch "+marks+"."+name+"; while true; do sleep 0.05; done")
	if class != "" {
		spec = strings.Replace(spec, "  runtimeClassName: process", "  runtimeClassName: process\n  priorityClassName: "+class, 1)
	}
	return spec
}

func TestDrainStopsPodsLowestPriorityFirst(t *testing.T) {
	for _, via := range []string{"cli", "SIGPWR"} {
		t.Run(via, func(t *testing.T) {
			d := newDaemon(t)
			d.withClasses("shutdownGracePeriodByPodPriority: [{priority: 0, shutdownGracePeriodSeconds: 5}, {priority: 1000, shutdownGracePeriodSeconds: 5}]\n")
			d.start()
			marks := filepath.Join(d.dir, "order")
			d.write("vip.yaml", drainPod("vip", "high", marks))
			d.write("low.yaml", drainPod("low", "", marks))
			waitFor(t, "both pods (vip, low) to start", func() bool { return exists(marks+".vip") && exists(marks+".low") })
			if via == "cli" {
				out, errOut, code := d.cli("drain")
				if code != 0 || !strings.Contains(out, "drained") {
					t.Fatalf("drain: %d %s %s", code, out, errOut)
				}
			} else {
				d.cmd.Process.Signal(syscall.SIGPWR)
			}
			p := d.waitPod("vip", 10*time.Second, func(p *v1.Pod) bool {
				return p.Status.Phase == v1.PodFailed && p.Status.ContainerStatuses[0].State.Terminated != nil
			})
			if p.Status.Reason != "Terminated" || !strings.Contains(p.Status.Message, "node shutdown") {
				t.Fatalf("vip: %s %q", describePod(p), p.Status.Message)
			}
			if got := strings.Join(readLines(marks), ","); got != "low,vip" {
				t.Fatalf("stop order %s: the low-priority pod must go first", got)
			}
			// Nothing is admitted while drained; uncordon admits again.
			d.write("late.yaml", processPod("late", "Always", 2, "exec sleep 1000"))
			d.waitPod("late", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Reason == "NodeShutdown" })
			if _, errOut, code := d.cli("uncordon"); code != 0 {
				t.Fatalf("uncordon: %s", errOut)
			}
			d.write("late.yaml", processPod("late", "Always", 2, "exec sleep 999")) // any change re-runs admission
			d.waitPod("late", 10*time.Second, running)
		})
	}
}
