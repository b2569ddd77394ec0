package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/workloadfile"
)

// workloadsYAML is a DaemonSet on every device and a 3-replica
// Deployment spread over the zones, that leaves a lost device after 5 s.
var workloadsYAML = workloadfile.File(
	workloadfile.DaemonSet("agent", `
runtimeClassName: process
terminationGracePeriodSeconds: 1
containers:
- {name: main, image: host, command: ["sh", "-c", "exec sleep 1001"]}`),
	workloadfile.Deployment("bridge", 3, `
runtimeClassName: process
terminationGracePeriodSeconds: 1
tolerations:
- {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 5}
- {key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute, tolerationSeconds: 5}`,
		workloadfile.Spread("zone", "bridge"), `
containers:
- name: main
  image: host
  command: ["sh", "-c", "exec sleep 1002"]
  resources: {requests: {cpu: 10m, memory: 8Mi}}`))

// hubPodsByApp lists the hub's pods (get pods -A -o json) that run
// (mirrored Running, not terminating) by their app label, as device IDs.
func hubPodsByApp(t *testing.T, h *podhubServer) (running map[string][]string, all []v1.Pod) {
	t.Helper()
	out, code := h.cli("get", "pods", "-A", "-o", "json")
	if code != 0 {
		t.Fatalf("get pods -A: %s", out)
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("get pods -A -o json: %v\n%s", err, out)
	}
	running = map[string][]string{}
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == v1.PodRunning && p.Spec.NodeName != "" {
			running[p.Labels["app"]] = append(running[p.Labels["app"]], p.Spec.NodeName)
		}
	}
	for _, devs := range running {
		sort.Strings(devs)
	}
	return running, list.Items
}

// startFleet enrols n devices dev-1..dev-n in zones a, b, c in turn,
// starts a real podvisor daemon for each, and waits for them Ready.
// hubExtra lines join each device's hub: section (two-space indented).
func startFleet(t *testing.T, h *podhubServer, n int, hubExtra ...string) ([]string, map[string]*daemon, map[string]string) {
	return startFleetVia(t, h, n, nil, hubExtra...)
}

// startFleetVia is startFleet with each device reaching the broker at
// via(id) (nil: the hub's own address), a relay the test can cut.
func startFleetVia(t *testing.T, h *podhubServer, n int, via func(id string) string, hubExtra ...string) ([]string, map[string]*daemon, map[string]string) {
	zone := map[string]string{}
	daemons := map[string]*daemon{}
	var ids []string
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("dev-%d", i)
		ids = append(ids, id)
		zone[id] = string(rune('a' + (i-1)%3))
		if out, code := h.cli("label", "device", id, "zone="+zone[id]); code != 0 {
			t.Fatalf("label %s: %s", id, out)
		}
		_, hubConfig := h.enrol(t, id)
		if via != nil {
			if !strings.Contains(hubConfig, "mqtts://"+h.addr) {
				t.Fatalf("%s's config does not name the hub's address:\n%s", id, hubConfig)
			}
			hubConfig = strings.Replace(hubConfig, "mqtts://"+h.addr, "mqtts://"+via(id), 1)
		}
		d := newDaemon(t)
		d.withConfig(hubConfig + hostCommandsAsRoot + strings.Join(hubExtra, ""))
		d.start()
		daemons[id] = d
	}
	waitForLong(t, 60*time.Second, fmt.Sprintf("%d devices Ready at the hub", n), func() bool {
		out, _ := h.cli("get", "devices")
		for _, id := range ids {
			if deviceStatus(out, id) != "Ready" {
				return false
			}
		}
		return true
	})

	return ids, daemons, zone
}

// The hub as a scheduler, end to end with real binaries: six podvisor
// daemons in three zones, a DaemonSet on each, a Deployment spread one
// per zone; a device killed loses its Deployment pod to another device
// of its zone after the shortened toleration, its DaemonSet pod stays;
// deleting the Deployment stops its pods on the devices.
func TestPodhubSchedulesWorkloads(t *testing.T) {
	h := newPodhub(t)
	_, daemons, zone := startFleet(t, h, 6)
	file := filepath.Join(t.TempDir(), "fleet.yaml")
	os.WriteFile(file, []byte(workloadsYAML), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 || !strings.Contains(out, "1 deployment(s), 1 daemonset(s)") {
		t.Fatalf("apply: %d %s", code, out)
	}
	var placed map[string][]string
	waitForValue(t, 90*time.Second, "the agent Running on all six devices and bridge on three, one per zone",
		func() map[string][]string { placed, _ = hubPodsByApp(t, h); return placed },
		func(m map[string][]string) bool {
			zones := map[string]bool{}
			for _, d := range m["bridge"] {
				zones[zone[d]] = true
			}
			return len(m["agent"]) == 6 && len(m["bridge"]) == 3 && len(zones) == 3
		})
	// READY counts the pods their devices report Ready, once the pass
	// their reports asked for has run.
	waitForLong(t, 30*time.Second, "get deployments showing bridge 3/3 Ready", func() bool {
		out, _ := h.cli("get", "deployments")
		return strings.Contains(out, "bridge") && strings.Contains(out, "3/3")
	})
	out, _ := h.cli("get", "daemonsets")
	if !strings.Contains(out, "agent") {
		t.Errorf("get daemonsets:\n%s", out)
	}
	out, _ = h.cli("get", "pods", "-A", "-o", "wide")
	if !strings.Contains(out, "DEVICE") || !strings.Contains(out, "NOMINATED NODE") || !strings.Contains(out, placed["bridge"][0]) {
		t.Errorf("get pods -A -o wide:\n%s", out)
	}

	// The hub restarts: it keeps the workloads and their placement, and
	// signs no document again.
	generations := func() string {
		out, code := h.cli("get", "devices", "-o", "json")
		var ds []struct {
			ID         string `json:"id"`
			Generation int64  `json:"generation"`
		}
		if code != 0 || json.Unmarshal([]byte(out), &ds) != nil {
			t.Fatalf("get devices -o json: %s", out)
		}
		return fmt.Sprint(ds)
	}
	before := generations()
	h.stop()
	h.start()
	waitForValue(t, 60*time.Second, "the same placement after the hub restarted",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool { return fmt.Sprint(m) == fmt.Sprint(placed) })
	if after := generations(); after != before {
		t.Errorf("generations changed across a hub restart:\n%s\n%s", before, after)
	}

	// Kill the device of one bridge pod.
	lost := placed["bridge"][0]
	daemons[lost].kill()
	moved := waitForValue(t, 60*time.Second, "bridge replaced away from "+lost+" (toleration 5 s), still one per zone",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool {
			zones := map[string]bool{}
			for _, d := range m["bridge"] {
				if d == lost {
					return false
				}
				zones[zone[d]] = true
			}
			return len(m["bridge"]) == 3 && len(zones) == 3
		})
	_, all := hubPodsByApp(t, h)
	agents, terminatingOnLost := 0, false
	for _, p := range all {
		if p.Labels["app"] == "agent" {
			agents++
			if p.Spec.NodeName == lost && p.DeletionTimestamp != nil {
				t.Errorf("the DaemonSet pod of the lost device %s is being deleted", lost)
			}
		}
		if p.Labels["app"] == "bridge" && p.Spec.NodeName == lost && p.DeletionTimestamp != nil {
			terminatingOnLost = true
		}
	}
	if agents != 6 {
		t.Errorf("%d agent pods at the hub, want 6 (the lost device's kept, none made elsewhere)", agents)
	}
	if !terminatingOnLost {
		t.Errorf("the lost device's bridge pod is not shown terminating until it confirms: %v", moved)
	}
	out, _ = h.cli("describe", "deployment", "bridge")
	if !strings.Contains(out, "TaintManagerEviction") || !strings.Contains(out, "Scheduled") {
		t.Errorf("describe deployment bridge lacks the eviction and scheduling events:\n%s", out)
	}

	// Deleting the Deployment stops its pods on their devices.
	if out, code := h.cli("delete", "deployment", "bridge"); code != 0 {
		t.Fatalf("delete deployment: %s", out)
	}
	for _, id := range moved["bridge"] {
		d := daemons[id]
		waitForLong(t, 30*time.Second, "no bridge pod left on "+id, func() bool {
			out, _, _ := d.cli("get", "pods")
			return !strings.Contains(out, "bridge-")
		})
	}
	if m, _ := hubPodsByApp(t, h); len(m["agent"]) != 5 {
		t.Errorf("agent pods running after the delete: %v, want the 5 live devices' untouched", m["agent"])
	}
}

// Priority preemption across the fleet: two devices each full with a
// low-priority Deployment pod; a pod of a higher PriorityClass preempts
// one of them (which stops on its device), then runs there, and the
// replacement of the victim stays Pending for want of CPU.
func TestPodhubPreemptsAcrossFleet(t *testing.T) {
	h := newPodhub(t)
	_, daemons, _ := startFleet(t, h, 2)
	var devs []struct {
		Node *v1.NodeStatus `json:"node"`
	}
	// A device is Ready from its presence, before its first heartbeat
	// brings its node status.
	waitForLong(t, 60*time.Second, "the devices' node status at the hub", func() bool {
		out, code := h.cli("get", "devices", "-o", "json")
		devs = nil
		return code == 0 && json.Unmarshal([]byte(out), &devs) == nil && len(devs) == 2 && devs[0].Node != nil
	})
	cpu := devs[0].Node.Allocatable[v1.ResourceCPU]
	big := fmt.Sprintf("%dm", cpu.MilliValue()*6/10) // two never fit on one device
	pod := func(kind, name, extra string) string {
		return fmt.Sprintf(`apiVersion: %s
kind: %s
metadata: {name: %s, labels: {app: %s}}
spec:
%s`, map[string]string{"Deployment": "apps/v1", "Pod": "v1"}[kind], kind, name, name, extra)
	}
	spec := `runtimeClassName: process
terminationGracePeriodSeconds: 1
containers:
- name: main
  image: host
  command: ["sh", "-c", "exec sleep 1003"]
  resources: {requests: {cpu: ` + big + `}}
`
	indent := func(s, by string) string {
		return by + strings.ReplaceAll(strings.TrimSuffix(s, "\n"), "\n", "\n"+by) + "\n"
	}
	filler := pod("Deployment", "filler", "  replicas: 2\n  selector: {matchLabels: {app: filler}}\n  template:\n"+
		"    metadata: {labels: {app: filler}}\n    spec:\n"+indent(spec, "      "))
	file := filepath.Join(t.TempDir(), "filler.yaml")
	os.WriteFile(file, []byte(filler), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 {
		t.Fatalf("apply filler: %s", out)
	}
	waitForValue(t, 60*time.Second, "filler Running on both devices",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool { return len(m["filler"]) == 2 && m["filler"][0] != m["filler"][1] })

	urgent := "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\n" +
		pod("Pod", "urgent", indent("priorityClassName: high\n"+spec, "  "))
	file = filepath.Join(t.TempDir(), "urgent.yaml")
	os.WriteFile(file, []byte(urgent), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 || !strings.Contains(out, "1 priorityclass(es), 1 pod(s)") {
		t.Fatalf("apply urgent: %d %s", code, out)
	}
	after := waitForValue(t, 60*time.Second, "urgent Running after preempting one filler pod",
		func() map[string][]string { m, _ := hubPodsByApp(t, h); return m },
		func(m map[string][]string) bool {
			return len(m["urgent"]) == 1 && len(m["filler"]) == 1 && m["filler"][0] != m["urgent"][0]
		})
	// The device knows the hub's PriorityClass from the pod it got.
	if p := daemons[after["urgent"][0]].waitPod("urgent", 10*time.Second, running); p.Spec.Priority == nil || *p.Spec.Priority != 1000 {
		t.Errorf("urgent runs on its device at priority %v, want 1000 (the hub's class)", p.Spec.Priority)
	}
	waitForLong(t, 30*time.Second, "the victim's replacement Pending for want of cpu", func() bool {
		_, all := hubPodsByApp(t, h)
		for _, p := range all {
			for _, c := range p.Status.Conditions {
				if p.Labels["app"] == "filler" && c.Type == v1.PodScheduled && c.Status == v1.ConditionFalse &&
					strings.Contains(c.Message, "Insufficient cpu") {
					return true
				}
			}
		}
		return false
	})
	if out, _ := h.cli("get", "priorityclasses"); !strings.Contains(out, "high") || !strings.Contains(out, "1000") {
		t.Errorf("get priorityclasses:\n%s", out)
	}
}
