package hub_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
)

func dbSet(image string) string {
	return `apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 3
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      containers:
      - name: c
        image: "` + image + `"
        resources: {requests: {cpu: 100m, memory: 64Mi}}
`
}

// A StatefulSet's status is the one its controller stored in the pass
// (Ready as the devices report), its revisions are kept with their
// templates, and the rollout verbs kubectl has for it work on the stored
// object: undo, restart, history; pause and resume are refused in
// kubectl's words.
func TestStatefulSetStatusRevisionsAndUndo(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	url := srv.URL + "/v1/workloads/statefulsets/default/db"
	get := func() *appsv1.StatefulSet {
		var list []appsv1.StatefulSet
		getJSON(t, srv.URL+"/v1/workloads/statefulsets", &list)
		if len(list) != 1 {
			t.Fatalf("%d statefulsets", len(list))
		}
		var d workloaddb.WorkloadDetail
		getJSON(t, url, &d)
		if !strings.Contains(string(d.Object), `"readyReplicas"`) && list[0].Status.ReadyReplicas > 0 {
			t.Errorf("describe's object has no stored status: %s", d.Object)
		}
		return &list[0]
	}
	revisions := func() []workloaddb.Revision {
		var revs []workloaddb.Revision
		getJSON(t, url+"/revisions", &revs)
		return revs
	}
	seqs := map[string]int64{}
	ready := func(string) bool { return true }
	r.apply(dbSet("process:///v1"))
	r.pass()
	s := get()
	rev1 := s.Status.UpdateRevision
	if st := s.Status; st.Replicas != 3 || st.ReadyReplicas != 0 || st.ObservedGeneration != 1 || st.CurrentRevision != rev1 ||
		!strings.HasPrefix(rev1, "db-") {
		t.Fatalf("placed, not reported: status %+v, want 3 replicas none ready at db-<hash>", st)
	}
	r.now = r.now.Add(time.Second)
	r.report(seqs, ready)
	r.pass()
	if st := get().Status; st.ReadyReplicas != 3 || st.AvailableReplicas != 3 || st.CurrentReplicas != 3 {
		t.Fatalf("reported Ready: status %+v", st)
	}
	if revs := revisions(); len(revs) != 1 || revs[0].Number != 1 || "db-"+revs[0].Hash != rev1 || !strings.Contains(string(revs[0].Template), "process:///v1") {
		t.Fatalf("revisions %+v, want 1 with its template", revs)
	}
	if code, out := rollout(t, url, "undo", api.RolloutRequest{}); code == http.StatusOK || out != "no last revision to roll back to" {
		t.Errorf("undo with one revision: %d %s", code, out)
	}
	for verb, want := range map[string]string{"pause": `statefulsets.apps "db" pausing is not supported`, "resume": `statefulsets.apps "db" resuming is not supported`} {
		if code, out := rollout(t, url, verb, api.RolloutRequest{}); code == http.StatusOK || out != want {
			t.Errorf("%s: %d %q, want %q", verb, code, out, want)
		}
	}
	r.apply(dbSet("process:///v2"))
	r.now = r.now.Add(time.Second)
	r.pass()
	s = get()
	if st := s.Status; st.ObservedGeneration != 2 || st.CurrentRevision != rev1 || st.UpdateRevision == rev1 || st.UpdatedReplicas != 0 {
		t.Fatalf("new template: status %+v, want generation 2 observed, current %s, a new update revision", st, rev1)
	}
	if revs := revisions(); len(revs) != 2 || revs[1].Number != 2 {
		t.Fatalf("revisions %+v, want 2", revs)
	}
	// The pass reads the template of the current revision alone: pods of
	// it are made again from it.
	stored, err := r.hub.Workloads().Revisions()
	if err != nil {
		t.Fatal(err)
	}
	if revs := stored[workloaddb.WorkloadKey{Kind: "StatefulSet", Namespace: "default", Name: "db"}]; len(revs) != 2 ||
		!strings.Contains(string(revs[0].Template), "process:///v1") || revs[1].Template != nil {
		t.Fatalf("revisions as the pass reads them: %+v, want the current one's template only", revs)
	}
	if code, out := rollout(t, url, "undo", api.RolloutRequest{ToRevision: 7}); code == http.StatusOK || out != "unable to find specified revision 7 in history" {
		t.Errorf("undo to a revision not there: %d %s", code, out)
	}
	if code, out := rollout(t, url, "undo", api.RolloutRequest{}); code != http.StatusOK || out != "rolled back" {
		t.Fatalf("undo: %d %s", code, out)
	}
	r.pass()
	s = get()
	if s.Spec.Template.Spec.Containers[0].Image != "process:///v1" || s.Generation != 3 || s.Status.UpdateRevision != rev1 {
		t.Fatalf("after undo: image %s, generation %d, status %+v", s.Spec.Template.Spec.Containers[0].Image, s.Generation, s.Status)
	}
	if revs := revisions(); len(revs) != 2 || revs[1].Number != 3 || "db-"+revs[1].Hash != rev1 {
		t.Fatalf("revisions after undo %+v, want the first numbered 3", revs)
	}
	if code, out := rollout(t, url, "restart", api.RolloutRequest{}); code != http.StatusOK || out != "restarted" {
		t.Errorf("restart: %d %s", code, out)
	}
	if s := get(); s.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" || s.Generation != 4 {
		t.Errorf("restart: template annotations %v, generation %d", s.Spec.Template.Annotations, s.Generation)
	}
}
