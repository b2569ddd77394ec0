package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// withClasses gives the daemon a config dir with a "high" PriorityClass.
func (d *daemon) withClasses(extra string) {
	dir := filepath.Join(d.dir, "etc", "priorityclasses")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "high.yaml"), []byte("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n"), 0o644)
	d.withConfig("configDir: " + filepath.Join(d.dir, "etc") + "\n" + extra)
}

func classPod(name, class string) string {
	spec := processPod(name, "Always", 2, "exec sleep 1000")
	if class != "" {
		spec = strings.Replace(spec, "  runtimeClassName: process", "  runtimeClassName: process\n  priorityClassName: "+class, 1)
	}
	return spec
}

func TestAdmissionAndPreemption(t *testing.T) {
	d := newDaemon(t)
	d.withClasses("node: {maxPods: 2}\n")
	d.start()
	d.write("low1.yaml", classPod("low1", ""))
	d.write("low2.yaml", classPod("low2", ""))
	d.waitPod("low1", 10*time.Second, running)
	d.waitPod("low2", 10*time.Second, running)
	d.write("low3.yaml", classPod("low3", ""))
	p := d.waitPod("low3", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Reason == "OutOfpods" })
	if p.Status.Phase != v1.PodPending {
		t.Fatalf("a pod that does not fit stays Pending: %s", describePod(p))
	}
	// A higher-priority pod preempts one of the low ones.
	d.write("vip.yaml", classPod("vip", "high"))
	vip := d.waitPod("vip", 15*time.Second, running)
	if *vip.Spec.Priority != 1000 {
		t.Fatalf("priority = %d", *vip.Spec.Priority)
	}
	list, _ := d.client.Pods(t.Context())
	preempted := 0
	for _, q := range list.Items {
		if q.Status.Reason == "Preempted" {
			preempted++
			if q.Status.Phase != v1.PodFailed {
				t.Fatalf("a preempted pod ends Failed: %s", describePod(&q))
			}
		}
	}
	if preempted != 1 {
		t.Fatalf("want exactly one preempted pod, got %d", preempted)
	}
	out, _, _ := d.cli("get", "pods")
	if !strings.Contains(out, "Preempted") || !strings.Contains(out, "OutOfpods") {
		t.Fatalf("get pods:\n%s", out)
	}
}

func TestUnknownPriorityClassIsRejected(t *testing.T) {
	d := newDaemon(t)
	d.withClasses("")
	d.start()
	d.write("bad.yaml", classPod("bad", "nosuch"))
	p := d.waitPod("bad.yaml", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Reason == "Invalid" })
	if !strings.Contains(p.Status.Message, `no PriorityClass with name "nosuch"`) {
		t.Fatalf("message = %q", p.Status.Message)
	}
}

func TestGetNode(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("node: {maxPods: 7, systemReserved: {cpu: 500m, memory: 100Mi}}\neviction: {hard: {memory.available: 200Mi}}\n")
	d.start()
	out, _, code := d.cli("get", "node", "-o", "json")
	var n v1.Node
	if err := json.Unmarshal([]byte(out), &n); err != nil || code != 0 {
		t.Fatalf("get node -o json: %v\n%s", err, out)
	}
	c, a := n.Status.Capacity, n.Status.Allocatable
	if a.Pods().Value() != 7 || c.Cpu().MilliValue()-a.Cpu().MilliValue() != 500 {
		t.Fatalf("capacity %v allocatable %v", c, a)
	}
	if c.Memory().Value()-a.Memory().Value() != 300<<20 { // reserved 100Mi + hard threshold 200Mi
		t.Fatalf("memory capacity %s, allocatable %s", c.Memory(), a.Memory())
	}
	conds := map[v1.NodeConditionType]v1.ConditionStatus{}
	for _, cond := range n.Status.Conditions {
		conds[cond.Type] = cond.Status
	}
	if conds[v1.NodeReady] != v1.ConditionTrue || conds[v1.NodeMemoryPressure] != v1.ConditionFalse ||
		conds[v1.NodeDiskPressure] != v1.ConditionFalse || conds[v1.NodePIDPressure] != v1.ConditionFalse {
		t.Fatalf("conditions = %v", conds)
	}
	if !strings.HasPrefix(n.Status.NodeInfo.KubeletVersion, "podvisor ") {
		t.Fatalf("version = %q", n.Status.NodeInfo.KubeletVersion)
	}
	out, _, _ = d.cli("get", "node")
	if !strings.Contains(out, "Ready") || !strings.Contains(out, "NAME") {
		t.Fatalf("get node:\n%s", out)
	}
}
