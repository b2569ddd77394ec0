package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/podvisor/podvisor/test/workloadfile"
)

// drainYAML is a DaemonSet on both devices, a Deployment with one ready
// pod per device (a readiness probe, spread by hostname) and a budget
// that wants both.
var drainYAML = workloadfile.File(
	workloadfile.DaemonSet("agent", `
runtimeClassName: process
terminationGracePeriodSeconds: 1
containers:
- {name: main, image: host, command: ["sh", "-c", "exec sleep 1004"]}`),
	workloadfile.Deployment("web", 2, `
runtimeClassName: process
terminationGracePeriodSeconds: 1
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
containers:
- name: main
  image: host
  command: ["sh", "-c", "exec sleep 1005"]
  readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}`)) + `---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
`

// podhub drain end to end with real daemons: DaemonSet pods stop a drain
// without --ignore-daemonsets; the web pod's eviction is refused with
// kubectl's words, naming the budget, and retried, while the pod keeps
// running; once the budget is gone the eviction goes through, the device
// stops the pod and the drain ends.
//
// The budget has no room either way: it wants both pods. Whether it has
// room once a third replica is ready depends on the hub reading its
// devices' readiness (Input.Observed); until then it counts no pod
// healthy, and room is made by deleting the budget.
func TestPodhubDrainHonoursTheBudget(t *testing.T) {
	h := newPodhub(t)
	startFleet(t, h, 2)
	file := filepath.Join(t.TempDir(), "web.yaml")
	os.WriteFile(file, []byte(drainYAML), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 || !strings.Contains(out, "1 poddisruptionbudget(s) applied") {
		t.Fatalf("apply: %d %s", code, out)
	}
	waitForValue(t, 90*time.Second, "web and agent Running on both devices",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool {
			return len(m["web"]) == 2 && len(m["agent"]) == 2 && m["web"][0] != m["web"][1]
		})
	var web string
	_, all := hubPodsByApp(t, h)
	for _, p := range all {
		if p.Labels["app"] == "web" && p.Spec.NodeName == "dev-1" {
			web = p.Name
		}
	}
	out, code := h.cli("drain", "device", "dev-1")
	if code != 1 || !strings.Contains(out, "device/dev-1 cordoned") ||
		!strings.Contains(out, `error: unable to drain device "dev-1" due to error: cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): default/agent-`) {
		t.Fatalf("drain without --ignore-daemonsets: %d\n%s", code, out)
	}

	cmd := exec.Command(podhubBinary(), "--data-dir", h.dataDir, "drain", "device", "dev-1", "--ignore-daemonsets", "--timeout", "120s")
	var stdout, stderr lockedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-done
		}
	})
	refused := `error when evicting pods/"` + web + `" -n "default" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget.` + "\n" +
		"  The disruption budget web needs 2 healthy pods and has "
	waitForLong(t, 30*time.Second, "the eviction refused twice, naming the budget", func() bool {
		return strings.Count(stderr.String(), refused) >= 2
	})
	if !strings.Contains(stderr.String(), "Warning: ignoring DaemonSet-managed Pods: default/agent-") {
		t.Errorf("no warning for the DaemonSet pod:\n%s", stderr.String())
	}
	if m, _ := hubPodsByApp(t, h); len(m["web"]) != 2 {
		t.Fatalf("web pods running during the refused drain: %v", m["web"])
	}
	if out, _ := h.cli("get", "pdb"); !strings.Contains(out, "ALLOWED DISRUPTIONS") || !strings.Contains(strings.Join(strings.Fields(out), " "), "default web 2 N/A 0") {
		t.Errorf("get pdb:\n%s", out)
	}
	if out, _ := h.cli("describe", "pdb", "web"); !strings.Contains(out, "InsufficientPods") || !strings.Contains(out, "Total:") {
		t.Errorf("describe pdb:\n%s", out)
	}

	// Room for one disruption: a third replica, on dev-2 (dev-1 is
	// cordoned). Once the hub reads its devices' readiness the budget
	// counts 3 healthy pods and the drain goes on; until then it counts
	// none, and the budget has to go.
	os.WriteFile(file, []byte(strings.Replace(drainYAML, "replicas: 2", "replicas: 3", 1)), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 {
		t.Fatalf("scale to 3: %s", out)
	}
	waitForValue(t, 60*time.Second, "three web pods Running",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool { return len(m["web"]) == 3 })
	healthy := func() int32 {
		out, _ := h.cli("get", "pdb", "-o", "json")
		var list []policyv1.PodDisruptionBudget
		if json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 {
			return -1
		}
		return list[0].Status.CurrentHealthy
	}
	deadline := time.Now().Add(10 * time.Second)
	for healthy() < 3 && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	if got := healthy(); got >= 3 {
		t.Logf("the budget counts %d healthy pods: the scale-up makes room", got)
	} else {
		t.Logf("the budget counts %d healthy pods (no readiness from the devices at the hub yet): deleting it", got)
		if out, code := h.cli("delete", "pdb", "web"); code != 0 || !strings.Contains(out, `poddisruptionbudget.policy "web" deleted`) {
			t.Fatalf("delete pdb: %d %s", code, out)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("drain not done 60s after the budget went\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	for _, want := range []string{"evicting pod default/" + web + "\n", "pod/" + web + " evicted\n", "device/dev-1 drained\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("drain output lacks %q:\n%s", want, stdout.String())
		}
	}
	m, all := hubPodsByApp(t, h)
	if len(m["agent"]) != 2 || len(m["web"]) != 2 || m["web"][0] != "dev-2" || m["web"][1] != "dev-2" {
		t.Errorf("after the drain: agent on %v (want both devices), web on %v (want two on dev-2)", m["agent"], m["web"])
	}
	for _, p := range all {
		if p.Name == web {
			t.Errorf("%s still held after the drain: %v", web, p.Status.Phase)
		}
		if p.Labels["app"] == "web" && p.Spec.NodeName == "dev-1" && p.DeletionTimestamp == nil {
			t.Errorf("a web pod placed on the cordoned device: %s", p.Name)
		}
		if p.Labels["app"] == "web" && p.Status.Phase == v1.PodPending && p.Spec.NodeName != "" {
			t.Errorf("pending pod %s bound to %s", p.Name, p.Spec.NodeName)
		}
	}
}
