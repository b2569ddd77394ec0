package hub_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/podvisor/podvisor/sync/protocol"
)

const statefulSetYAML = `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
      annotations: {fencing.podvisor.io/lease-seconds: "30"}
    spec:
      terminationGracePeriodSeconds: 10
      tolerations:
      - {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 20}
      containers:
      - name: c
        image: "process:///bin/sleep"
        args: ["1000"]
        resources: {requests: {cpu: 100m, memory: 64Mi}}
`

// A StatefulSet's pod on a device gone silent is deleted after its
// toleration but keeps its name: the hub makes it again elsewhere only
// once the pod's self-fencing lease, its grace period and the clock
// margin have passed since the device was last heard from — waking for
// it by itself.
func TestStatefulSetPodMovesOnlyAfterItsLease(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	r.apply(statefulSetYAML)
	r.pass()
	pods, err := r.hub.Workloads().HubPods()
	if err != nil {
		t.Fatal(err)
	}
	where := map[string]string{}
	for _, p := range pods {
		where[p.Name] = p.Spec.NodeName
		if p.Labels["statefulset.kubernetes.io/pod-name"] != p.Name || p.Labels["controller-revision-hash"] == "" {
			t.Errorf("pod %s labels %v", p.Name, p.Labels)
		}
	}
	if len(where) != 2 || where["db-0"] == "" || where["db-1"] == "" {
		t.Fatalf("pods %v, want db-0 and db-1 placed", where)
	}
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/workloads/statefulsets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []appsv1.StatefulSet
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	// Placed, not reported by their devices: none is Ready.
	rev := pods[0].Labels["controller-revision-hash"]
	if st := list[0].Status; st.Replicas != 2 || st.ReadyReplicas != 0 || st.UpdatedReplicas != 2 || st.CurrentReplicas != 2 ||
		st.UpdateRevision != rev || st.CurrentRevision != rev || st.ObservedGeneration != 1 || st.CollisionCount == nil {
		t.Errorf("status %+v", st)
	}
	lost := where["db-0"]
	if apps := r.desired(lost); len(apps) != 1 || apps[0] != "db" {
		t.Fatalf("device %s desired %v", lost, apps)
	}
	r.now = r.now.Add(time.Second)
	silentSince := r.now
	if _, err := r.fleet.SavePresence(lost, &protocol.Presence{Device: lost, Online: false}, r.now); err != nil {
		t.Fatal(err)
	}
	others := func() {
		for _, id := range []string{"d1", "d2", "d3"} {
			if id != lost {
				r.heartbeat(id)
			}
		}
	}
	r.now = silentSince.Add(20 * time.Second)
	others()
	next := r.pass()
	if _, term := r.placed(); len(term) != 1 || term[0] != "db@"+lost {
		t.Fatalf("terminating %v after the toleration, want db-0 on %s", term, lost)
	}
	// (30 s + 10 s) × 1.02 = 40.8 s.
	expiry := silentSince.Add(40800 * time.Millisecond)
	if !next.Equal(expiry) {
		t.Errorf("next pass at +%v, want the lease's end at +40.8s", next.Sub(silentSince))
	}
	r.now = expiry.Add(-time.Millisecond)
	others()
	r.pass()
	r.pass()
	live, term := r.placed()
	if len(term) != 1 || len(live["db"]) != 1 {
		t.Fatalf("before the lease ran out: live %v terminating %v; db-0 must not run twice", live, term)
	}
	r.now = expiry
	others()
	r.pass() // forgets db-0
	r.pass() // makes it again
	live, term = r.placed()
	if len(term) != 0 || len(live["db"]) != 2 || strings.Contains(strings.Join(live["db"], ","), lost) {
		t.Fatalf("after the lease: live %v terminating %v, want db-0 away from %s", live, term, lost)
	}
}
