package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/podvisor/podvisor/test/workloadfile"
)

// drainYAML is a DaemonSet on every device, a Deployment of two ready
// pods on two devices (a readiness probe, spread by hostname) and a
// budget that wants both.
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

// podhub drain end to end with six real daemons: DaemonSet pods stop a
// drain without --ignore-daemonsets; the web pod's eviction is refused
// with kubectl's words, naming the budget, and retried, while the pod
// keeps running; a third replica, once its device reports it Ready, gives
// the budget room: the eviction goes through, the device stops the pod
// and the drain ends.
func TestPodhubDrainHonoursTheBudget(t *testing.T) {
	h := newPodhub(t)
	ids, _, _ := startFleet(t, h, 6)
	file := filepath.Join(t.TempDir(), "web.yaml")
	os.WriteFile(file, []byte(drainYAML), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 || !strings.Contains(out, "1 poddisruptionbudget(s) applied") {
		t.Fatalf("apply: %d %s", code, out)
	}
	waitForValue(t, 90*time.Second, "web Running on two devices, agent on every one",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool {
			return len(m["web"]) == 2 && len(m["agent"]) == len(ids) && m["web"][0] != m["web"][1]
		})
	var web, drained string
	_, all := hubPodsByApp(t, h)
	for _, p := range all {
		if p.Labels["app"] == "web" && p.DeletionTimestamp == nil && web == "" {
			web, drained = p.Name, p.Spec.NodeName
		}
	}
	out, code := h.cli("drain", "device", drained)
	if code != 1 || !strings.Contains(out, "device/"+drained+" cordoned") ||
		!strings.Contains(out, `error: unable to drain device "`+drained+`" due to error: cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): default/agent-`) {
		t.Fatalf("drain without --ignore-daemonsets: %d\n%s", code, out)
	}

	cmd := exec.Command(podhubBinary(), "--data-dir", h.dataDir, "drain", "device", drained, "--ignore-daemonsets", "--timeout", "120s")
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

	// Room for one disruption: a third replica, on another device (the
	// drained one is cordoned), which the budget counts once its device
	// reports it Ready.
	os.WriteFile(file, []byte(strings.Replace(drainYAML, "replicas: 2", "replicas: 3", 1)), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 {
		t.Fatalf("scale to 3: %s", out)
	}
	healthy := func() int32 {
		out, _ := h.cli("get", "pdb", "-o", "json")
		var list []policyv1.PodDisruptionBudget
		if json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 {
			return -1
		}
		return list[0].Status.CurrentHealthy
	}
	waitForLong(t, 60*time.Second, "the budget counting the third replica healthy, or the drain evicting", func() bool {
		return healthy() >= 3 || strings.Contains(stdout.String(), "pod/"+web+" evicted")
	})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("drain: %v\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("drain not done 60s after the budget had room\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	for _, want := range []string{"evicting pod default/" + web + "\n", "pod/" + web + " evicted\n", "device/" + drained + " drained\n"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("drain output lacks %q:\n%s", want, stdout.String())
		}
	}
	// Deployments replace an evicted pod: three web pods again, none on
	// the drained device; the DaemonSet's pods stay on every device.
	waitForValue(t, 60*time.Second, "three web pods Running, off the drained device",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool { return len(m["web"]) == 3 && !slices.Contains(m["web"], drained) })
	m, all := hubPodsByApp(t, h)
	if len(m["agent"]) != len(ids) {
		t.Errorf("after the drain: agent on %v, want every device", m["agent"])
	}
	for _, p := range all {
		if p.Name == web {
			t.Errorf("%s still held after the drain: %v", web, p.Status.Phase)
		}
		if p.Labels["app"] == "web" && p.Spec.NodeName == drained && p.DeletionTimestamp == nil {
			t.Errorf("a web pod placed on the cordoned device: %s", p.Name)
		}
		if p.Labels["app"] == "web" && p.Status.Phase == v1.PodPending && p.Spec.NodeName != "" {
			t.Errorf("pending pod %s bound to %s", p.Name, p.Spec.NodeName)
		}
	}
}
