package hub_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

// bridgesYAML is two Deployments whose names share a prefix, with more
// replicas than the one device takes: every pod has events.
func bridgesYAML(replicas int) string {
	var b strings.Builder
	for _, name := range []string{"bridge", "bridge-canary"} {
		fmt.Fprintf(&b, `---
apiVersion: apps/v1
kind: Deployment
metadata: {name: %s}
spec:
  replicas: %d
  selector: {matchLabels: {app: %s}}
  template:
    metadata: {labels: {app: %s}}
    spec:
      containers:
      - {name: c, image: "process:///bin/sleep", args: ["1000"], resources: {requests: {cpu: 100m}}}
`, name, replicas, name, name)
	}
	return b.String()
}

// Describing a Deployment shows its own pods' events, and costs the same
// for a large Deployment as for a small one: one bounded query, not one
// per pod.
func TestDescribeDeploymentCostIsBounded(t *testing.T) {
	allocs := map[int]float64{}
	for _, replicas := range []int{100, 400} {
		r := newSchedRig(t, map[string]string{"d1": "a"})
		r.apply(bridgesYAML(replicas))
		r.pass()
		d, err := r.hub.Workloads().WorkloadDetail(workloaddb.KindDeployment, "default", "bridge")
		if err != nil {
			t.Fatal(err)
		}
		if len(d.Events) != 100 {
			t.Fatalf("%d replicas: %d events, want the newest 100", replicas, len(d.Events))
		}
		for i, e := range d.Events {
			mine := e.Kind == "Deployment" && e.Name == "bridge" ||
				e.Kind == "Pod" && strings.HasPrefix(e.Name, "bridge-") && !strings.HasPrefix(e.Name, "bridge-canary-")
			if !mine {
				t.Fatalf("event %d of %s %s: not bridge's", i, e.Kind, e.Name)
			}
			if i > 0 && e.Last.Before(d.Events[i-1].Last) {
				t.Fatalf("events out of order at %d", i)
			}
		}
		allocs[replicas] = testing.AllocsPerRun(5, func() {
			r.hub.Workloads().WorkloadDetail(workloaddb.KindDeployment, "default", "bridge")
		})
	}
	t.Logf("allocations per describe: %.0f for 100 replicas, %.0f for 400", allocs[100], allocs[400])
	if allocs[400] > 1.5*allocs[100] {
		t.Fatalf("describe allocates %.0f times for 400 replicas, %.0f for 100: its cost grows with the pods", allocs[400], allocs[100])
	}
}
