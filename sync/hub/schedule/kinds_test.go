package schedule

import (
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// A file as an operator applies it, decoded by kinds and scheduled: three
// bridge replicas, no two in one zone, the agent on every device, the
// PriorityClass applied to the bridge.
func TestAppliedFileIsScheduled(t *testing.T) {
	file := workloadfile.File(
		workloadfile.PriorityClass("important", 1000),
		workloadfile.DaemonSet("agent", `containers: [{name: agent, image: host, resources: {requests: {cpu: 50m, memory: 16Mi}}}]`),
		workloadfile.Deployment("bridge", 3, `
priorityClassName: important
topologySpreadConstraints:
- {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: bridge}}, minDomains: 3}
containers: [{name: bridge, image: host, resources: {requests: {cpu: 100m, memory: 32Mi}}}]`))
	objs, err := kinds.Decode("fleet.yaml", []byte(file))
	if err != nil {
		t.Fatal(err)
	}
	devs := zoned(6)
	plan := Schedule(Input{Now: t0, Devices: devs, DaemonSets: objs.DaemonSets, Deployments: objs.Deployments,
		Pods: objs.Pods, PriorityClasses: objs.PriorityClasses})
	if len(plan.Pending) != 0 || len(plan.Bindings) != 6+3 {
		t.Fatalf("bindings %d pending %+v", len(plan.Bindings), plan.Pending)
	}
	zones := map[string]int{}
	for _, p := range plan.Create {
		if !strings.HasPrefix(p.Name, "bridge-") {
			continue
		}
		if *p.Spec.Priority != 1000 {
			t.Errorf("%s: priority %d", p.Name, *p.Spec.Priority)
		}
		zones[zoneOf(devs, bindingOf(plan, p.Name))]++
	}
	if len(zones) != 3 {
		t.Errorf("bridge replicas per zone %v, want one in each of 3", zones)
	}
}
