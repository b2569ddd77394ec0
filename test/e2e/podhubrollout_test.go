package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/workloadfile"
)

// webDeployment is a 4-replica Deployment of process pods whose
// readiness probe runs probe, rolled one pod at a time (maxSurge 1,
// maxUnavailable 1) with a 15 s progress deadline, halted when half of
// at least two updated pods fail.
func webDeployment(command, probe string) string {
	return strings.Replace(workloadfile.Deployment("web", 4, `
runtimeClassName: process
terminationGracePeriodSeconds: 1
containers:
- name: main
  image: host
  command: ["sh", "-c", "exec `+command+`"]
  readinessProbe: {exec: {command: ["`+probe+`"]}, periodSeconds: 1}`),
		"metadata: {name: web}\nspec:\n", `metadata:
  name: web
  annotations: {rollout.podvisor.io/failure-threshold: "50%", rollout.podvisor.io/failure-minimum: "2"}
spec:
  progressDeadlineSeconds: 15
  strategy: {type: RollingUpdate, rollingUpdate: {maxSurge: 1, maxUnavailable: 1}}
`, 1)
}

// deploymentRow is the fields of NAME's row in podhub get deployments.
func deploymentRow(out, name string) []string {
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[1] == name {
			return f
		}
	}
	return nil
}

// Rolling updates that halt, end to end with real binaries: six podvisor
// daemons run a Deployment whose pods pass their readiness probe; its
// new revision's never do. The rollout takes no more than maxUnavailable
// down, halts once two updated pods failed by the progress deadline
// (rollout status exits non-zero saying so), get deployments shows the
// pods Ready as the devices report them, and rollout undo restores the
// previous revision everywhere.
func TestPodhubRolloutHaltsAndUndoes(t *testing.T) {
	h := newPodhub(t)
	startFleet(t, h, 6)
	file := filepath.Join(t.TempDir(), "web.yaml")
	apply := func(yaml string) {
		t.Helper()
		os.WriteFile(file, []byte(yaml), 0o644)
		if out, code := h.cli("apply", "-f", file); code != 0 {
			t.Fatalf("apply: %d %s", code, out)
		}
	}
	apply(webDeployment("sleep 1101", "true"))
	if out, code := h.cli("rollout", "status", "deployment/web", "--timeout", "90s"); code != 0 || !strings.Contains(out, `deployment "web" successfully rolled out`) {
		t.Fatalf("rollout status of the first revision: %d %s", code, out)
	}
	if row := deploymentRow(mustCLI(t, h, "get", "deployments"), "web"); len(row) < 5 || row[2] != "4/4" || row[3] != "4" || row[4] != "4" {
		t.Fatalf("get deployments: %v, want 4/4 4 4", row)
	}

	// A revision whose pods never become Ready.
	apply(webDeployment("sleep 1102", "false"))
	done := make(chan struct{})
	minReady := 4
	go func() {
		defer close(done)
		for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
			out, _ := h.cli("get", "deployments")
			if row := deploymentRow(out, "web"); len(row) > 2 {
				var ready, want int
				if _, err := fmt.Sscanf(row[2], "%d/%d", &ready, &want); err == nil && ready < minReady {
					minReady = ready
				}
			}
			if out, _ := h.cli("rollout", "status", "deployment/web", "--watch=false"); strings.Contains(out, "halted") {
				return
			}
		}
	}()
	out, code := h.cli("rollout", "status", "deployment/web", "--timeout", "90s")
	<-done
	if code == 0 || !strings.Contains(out, `deployment "web": ReplicaSet "web-`) || !strings.Contains(out, "rollout halted: 2 of 2 updated pods") {
		t.Fatalf("rollout status of the broken revision: %d %s", code, out)
	}
	if minReady < 3 {
		t.Errorf("READY went down to %d of 4: more than maxUnavailable 1", minReady)
	}
	row := deploymentRow(mustCLI(t, h, "get", "deployments"), "web")
	if len(row) < 5 || row[2] != "3/4" || row[3] != "2" || row[4] != "3" {
		t.Fatalf("get deployments after the halt: %v, want READY 3/4, UP-TO-DATE 2, AVAILABLE 3", row)
	}
	if n := countProcs("sleep 1102"); n != 2 {
		t.Errorf("%d pods of the broken revision run, want the 2 updated before the halt", n)
	}
	if out := mustCLI(t, h, "describe", "deployment", "web"); !strings.Contains(out, "RolloutHalted") {
		t.Errorf("describe deployment web lacks the RolloutHalted event:\n%s", out)
	}

	// Undo: the first template again, as revision 3, everywhere.
	if out := mustCLI(t, h, "rollout", "undo", "deployment/web"); out != "deployment.apps/web rolled back\n" {
		t.Fatalf("rollout undo: %q", out)
	}
	if out, code := h.cli("rollout", "status", "deployment/web", "--timeout", "90s"); code != 0 || !strings.Contains(out, `deployment "web" successfully rolled out`) {
		t.Fatalf("rollout status after undo: %d %s", code, out)
	}
	if row := deploymentRow(mustCLI(t, h, "get", "deployments"), "web"); len(row) < 5 || row[2] != "4/4" || row[3] != "4" || row[4] != "4" {
		t.Fatalf("get deployments after undo: %v, want 4/4 4 4", row)
	}
	waitForLong(t, 30*time.Second, "no pod of the broken revision left", func() bool { return countProcs("sleep 1102") == 0 })
	if out := mustCLI(t, h, "rollout", "history", "deployment/web"); !strings.Contains(out, "REVISION  CHANGE-CAUSE\n2         <none>\n3         <none>") {
		t.Errorf("rollout history:\n%s", out)
	}
}

func mustCLI(t *testing.T, h *podhubServer, args ...string) string {
	t.Helper()
	out, code := h.cli(args...)
	if code != 0 {
		t.Fatalf("podhub %s: %d %s", strings.Join(args, " "), code, out)
	}
	return out
}

// agentDaemonSet is a DaemonSet of process pods running command, Ready
// when their readiness probe passes.
func agentDaemonSet(command string) string {
	return workloadfile.DaemonSet("agent", `
runtimeClassName: process
terminationGracePeriodSeconds: 1
containers:
- name: main
  image: host
  command: ["sh", "-c", "exec `+command+`"]
  readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}`)
}

// An offline device holds back no DaemonSet rollout: with one of six
// daemons stopped, the new template rolls out to the other five (one at
// a time), rollout status says the rollout finished and names the
// device skipped; back online, the device gets the new revision.
func TestPodhubDaemonSetRolloutSkipsOfflineDevice(t *testing.T) {
	h := newPodhub(t)
	ids, daemons, _ := startFleet(t, h, 6)
	file := filepath.Join(t.TempDir(), "agent.yaml")
	apply := func(yaml string) {
		t.Helper()
		os.WriteFile(file, []byte(yaml), 0o644)
		if out, code := h.cli("apply", "-f", file); code != 0 {
			t.Fatalf("apply: %d %s", code, out)
		}
	}
	apply(agentDaemonSet("sleep 1201"))
	if out, code := h.cli("rollout", "status", "daemonset/agent", "--timeout", "90s"); code != 0 || !strings.Contains(out, `daemon set "agent" successfully rolled out`) {
		t.Fatalf("rollout status of the first revision: %d %s", code, out)
	}
	offline := ids[2]
	daemons[offline].stop(syscall.SIGTERM) // its pods keep running
	waitForLong(t, 30*time.Second, offline+" NotReady", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, offline) == "NotReady"
	})
	apply(agentDaemonSet("sleep 1202"))
	out, code := h.cli("rollout", "status", "daemonset/agent", "--timeout", "90s")
	if code != 0 || !strings.Contains(out, `daemon set "agent" successfully rolled out`) || !strings.Contains(out, "1 unreachable device(s) not updated, updated when they return: "+offline) {
		t.Fatalf("rollout status with %s offline: %d %s", offline, code, out)
	}
	if n := countProcs("sleep 1202"); n != 5 {
		t.Errorf("%d devices run the new revision, want the 5 online", n)
	}
	daemons[offline].start()
	waitForLong(t, 60*time.Second, offline+" back with the new revision, the old one gone", func() bool {
		return countProcs("sleep 1202") == 6 && countProcs("sleep 1201") == 0
	})
	waitForLong(t, 30*time.Second, "get daemonsets showing 6 up to date", func() bool {
		out, _ := h.cli("get", "daemonsets")
		f := deploymentRow(out, "agent")
		return len(f) > 6 && f[2] == "6" && f[5] == "6" && f[6] == "6"
	})
}
