package workloaddb_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/test/pgtest"
)

// The queries whose SQL differs between the stores (JSON inside the
// stored objects, rowid) answer the same on both: the global default
// PriorityClass, the replicas bound, a budget's status written onto its
// object, terminating pods, a StatefulSet's current revision's template,
// a Deployment's events with its pods'.
func TestDialectQueries(t *testing.T) { pgtest.EachStore(t, testDialectQueries) }

func testDialectQueries(t *testing.T) {
	s := testStore(t)
	now := time.Unix(1700000000, 0)
	apply := func(yaml string) error {
		t.Helper()
		objs, err := kinds.Decode("f.yaml", []byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return s.ApplyObjects(objs, now)
	}
	const classes = `apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: low}
value: 10
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: high}
value: 1000
globalDefault: true
`
	if err := apply(classes); err != nil {
		t.Fatal(err)
	}
	// Only one default (defaultClass reads the stored one).
	err := apply("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: other}\nvalue: 5\nglobalDefault: true\n")
	if err == nil || !strings.Contains(err.Error(), "PriorityClass high is already marked as default") {
		t.Fatalf("a second default: %v", err)
	}
	// A bare pod without a class gets the default's.
	if err := apply("apiVersion: v1\nkind: Pod\nmetadata: {name: solo}\nspec: {containers: [{name: c, image: busybox}]}\n"); err != nil {
		t.Fatal(err)
	}
	pods, err := s.HubPods()
	if err != nil || len(pods) != 1 || pods[0].Spec.PriorityClassName != "high" || pods[0].Spec.Priority == nil || *pods[0].Spec.Priority != 1000 {
		t.Fatalf("the bare pod: %+v %v", pods, err)
	}
	// The replicas bound sums the stored Deployments' spec.replicas.
	deployment := func(name string, replicas int) string {
		return "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: " + name + "}\nspec:\n  replicas: " + itoa(replicas) +
			"\n  selector: {matchLabels: {app: " + name + "}}\n  template:\n    metadata: {labels: {app: " + name + "}}\n    spec: {containers: [{name: c, image: busybox}]}\n"
	}
	if err := apply(deployment("web", 3)); err != nil {
		t.Fatal(err)
	}
	half := workloaddb.MaxHubPods / 2 // each Deployment's own bound
	if err := apply(deployment("huge1", half) + "---\n" + deployment("huge2", half)); err == nil || !strings.Contains(err.Error(), "replicas in all, more than") {
		t.Fatalf("over the replicas bound: %v", err)
	}
	// A budget's status lands on the budget of the same UID only.
	if err := apply("apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: web}\nspec: {minAvailable: 1, selector: {matchLabels: {app: web}}}\n"); err != nil {
		t.Fatal(err)
	}
	wl, err := s.LoadWorkloads()
	if err != nil || len(wl.PDBs) != 1 {
		t.Fatalf("budgets %v, %v", wl.PDBs, err)
	}
	pdb := wl.PDBs[0].DeepCopy()
	pdb.Status.DisruptionsAllowed, pdb.Status.ExpectedPods = 2, 3
	stale := pdb.DeepCopy()
	stale.UID, stale.Status.DisruptionsAllowed = "another", 7
	if err := s.StorePods(workloaddb.PodWrites{PDBs: []*policyv1.PodDisruptionBudget{pdb, stale}}, now); err != nil {
		t.Fatal(err)
	}
	if wl, err = s.LoadWorkloads(); err != nil || wl.PDBs[0].Status.DisruptionsAllowed != 2 || wl.PDBs[0].Status.ExpectedPods != 3 || wl.PDBs[0].Name != "web" {
		t.Fatalf("budget status %+v, %v", wl.PDBs[0].Status, err)
	}
	// Terminating: a pod with a deletionTimestamp on a device.
	k := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "default", Name: name} }
	podJSON := func(name string, deleting bool, owner, hash string) json.RawMessage {
		meta := map[string]any{"namespace": "default", "name": name}
		if deleting {
			meta["deletionTimestamp"] = "2026-11-29T00:00:00Z"
		}
		if owner != "" {
			meta["ownerReferences"] = []map[string]any{{"kind": "ReplicaSet", "name": owner, "apiVersion": "apps/v1", "uid": "u"}}
			meta["labels"] = map[string]string{"pod-template-hash": hash}
		}
		b, _ := json.Marshal(map[string]any{"metadata": meta, "spec": map[string]any{"nodeName": "d1"}})
		return b
	}
	ev := func(kind, name, reason string, at time.Time) workloaddb.SchedEvent {
		return workloaddb.SchedEvent{Kind: kind, Namespace: "default", Name: name, Type: "Normal", Reason: reason, Count: 1, First: at, Last: at}
	}
	if err := s.StorePods(workloaddb.PodWrites{
		Put: []workloaddb.PodWrite{{Key: k("gone"), Device: "d1", Raw: podJSON("gone", true, "", "")},
			{Key: k("web-5f7-abcde"), Device: "d1", Raw: podJSON("web-5f7-abcde", false, "web-5f7", "5f7")},
			{Key: k("web-other"), Device: "d1", Raw: podJSON("web-other", false, "elsewhere", "x")}},
		Events: []workloaddb.SchedEvent{ev("Deployment", "web", "ScalingReplicaSet", now),
			ev("Pod", "web-5f7-abcde", "Scheduled", now.Add(time.Second)), ev("Pod", "web-other", "Scheduled", now.Add(2*time.Second))},
	}, now); err != nil {
		t.Fatal(err)
	}
	term, err := s.Terminating()
	if err != nil || len(term) != 1 || term[0].Key.Name != "gone" || term[0].Device != "d1" {
		t.Fatalf("terminating %+v, %v", term, err)
	}
	d, err := s.WorkloadDetail(workloaddb.KindDeployment, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range d.Events {
		reasons = append(reasons, e.Kind+"/"+e.Name+"/"+e.Reason)
	}
	if strings.Join(reasons, " ") != "Deployment/web/ScalingReplicaSet Pod/web-5f7-abcde/Scheduled" {
		t.Fatalf("the Deployment's events: %v", reasons)
	}
	// A StatefulSet's current revision (named by its stored status) is
	// read with its template; the others without.
	if err := apply("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: db}\nspec:\n  replicas: 1\n  serviceName: db\n  selector: {matchLabels: {app: db}}\n  template:\n    metadata: {labels: {app: db}}\n    spec: {containers: [{name: c, image: busybox}]}\n"); err != nil {
		t.Fatal(err)
	}
	if err := s.StorePods(workloaddb.PodWrites{
		Statuses: []workloaddb.StatusWrite{{Kind: workloaddb.KindStatefulSet, Namespace: "default", Name: "db", Raw: json.RawMessage(`{"currentRevision":"db-h2"}`)}},
		Revisions: []workloaddb.RevisionSet{{Kind: workloaddb.KindStatefulSet, Namespace: "default", Name: "db", Revisions: []workloaddb.Revision{
			{Number: 1, Hash: "h1", Template: json.RawMessage(`{"v":1}`)}, {Number: 2, Hash: "h2", Template: json.RawMessage(`{"v":2}`)}}}},
	}, now); err != nil {
		t.Fatal(err)
	}
	revs, err := s.Revisions()
	if err != nil {
		t.Fatal(err)
	}
	got := revs[workloaddb.WorkloadKey{Kind: workloaddb.KindStatefulSet, Namespace: "default", Name: "db"}]
	if len(got) != 2 || got[0].Template != nil || got[1].Hash != "h2" || string(got[1].Template) != `{"v":2}` {
		t.Fatalf("revisions %+v", got)
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }
