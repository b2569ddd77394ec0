package hub_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// report has every device report its hub pods, Ready as ready says of
// the pod's image, in one status batch each (the device's outbox).
func (r *schedRig) report(seqs map[string]int64, ready func(image string) bool) {
	r.t.Helper()
	pods, err := r.hub.Workloads().HubPods()
	if err != nil {
		r.t.Fatal(err)
	}
	batches := map[string]*protocol.StatusBatch{}
	for _, p := range pods {
		dev := p.Spec.NodeName
		if dev == "" || p.DeletionTimestamp != nil {
			continue
		}
		b := batches[dev]
		if b == nil {
			b = &protocol.StatusBatch{Device: dev, Epoch: "e1", After: seqs[dev]}
			batches[dev] = b
		}
		st := v1.ConditionFalse
		if ready(p.Spec.Containers[0].Image) {
			st = v1.ConditionTrue
		}
		m := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace,
			Annotations: map[string]string{"podvisor.io/scheduled": "true"}},
			Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: st}}}}
		seqs[dev]++
		b.Items = append(b.Items, protocol.StatusItem{Seq: seqs[dev], Key: p.Namespace + "/" + p.Name, Pod: m})
	}
	for _, b := range batches {
		if _, _, gap, err := r.fleet.ApplyStatus(b, r.now); err != nil || gap {
			r.t.Fatalf("status of %s: gap %v, %v", b.Device, gap, err)
		}
	}
}

func getJSON(t *testing.T, url string, into any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

func rollout(t *testing.T, url, verb string, req api.RolloutRequest) (int, string) {
	t.Helper()
	body, _ := json.Marshal(req)
	resp, err := http.Post(url+"/rollout/"+verb, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct{ Done, Error string }
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out.Done + out.Error
}

// The API shows a Deployment's status as its controller computed it from
// what the devices report (READY is Ready pods, not placed ones), keeps
// its revisions, and its rollout verbs change the stored object: a
// broken revision is undone to the one before.
func TestDeploymentStatusRevisionsAndUndo(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	web := func(image string) string {
		return workloadfile.Deployment("web", 3, `containers: [{name: c, image: "`+image+`"}]`)
	}
	deployment := func() *appsv1.Deployment {
		var list []appsv1.Deployment
		getJSON(t, srv.URL+"/v1/workloads/deployments", &list)
		if len(list) != 1 {
			t.Fatalf("%d deployments", len(list))
		}
		return &list[0]
	}
	seqs := map[string]int64{}
	good := func(image string) bool { return image != "process:///bad" }
	r.apply(web("process:///v1"))
	r.pass()
	if d := deployment(); d.Status.Replicas != 3 || d.Status.ReadyReplicas != 0 || d.Status.AvailableReplicas != 0 {
		t.Fatalf("placed, not reported: status %+v, want 3 replicas and none ready", d.Status)
	}
	r.now = r.now.Add(time.Second)
	r.report(seqs, good)
	r.pass()
	d := deployment()
	if d.Status.ReadyReplicas != 3 || d.Status.AvailableReplicas != 3 || d.Status.ObservedGeneration != 1 || d.Annotations["deployment.kubernetes.io/revision"] != "1" {
		t.Fatalf("reported Ready: %+v, annotations %v", d.Status, d.Annotations)
	}
	// A broken revision: one surge pod that never becomes Ready.
	r.apply(web("process:///bad"))
	for range 3 {
		r.now = r.now.Add(time.Second)
		r.pass()
		r.report(seqs, good)
	}
	if d = deployment(); d.Status.UpdatedReplicas != 1 || d.Status.AvailableReplicas != 3 || d.Annotations["deployment.kubernetes.io/revision"] != "2" {
		t.Fatalf("broken revision: %+v, revision %s", d.Status, d.Annotations["deployment.kubernetes.io/revision"])
	}
	url := srv.URL + "/v1/workloads/deployments/default/web"
	var revs []workloaddb.Revision
	getJSON(t, url+"/revisions", &revs)
	if len(revs) != 2 || revs[0].Number != 1 || revs[1].Number != 2 || !strings.Contains(string(revs[0].Template), "process:///v1") {
		t.Fatalf("revisions %+v", revs)
	}
	if code, out := rollout(t, url, "resume", api.RolloutRequest{}); code == http.StatusOK || !strings.Contains(out, `deployments.apps "web" is not paused`) {
		t.Errorf("resume of a running deployment: %d %s", code, out)
	}
	if code, out := rollout(t, url, "undo", api.RolloutRequest{ToRevision: 7}); code == http.StatusOK || out != "unable to find specified revision 7 in history" {
		t.Errorf("undo to a revision not there: %d %s", code, out)
	}
	if code, out := rollout(t, url, "undo", api.RolloutRequest{}); code != http.StatusOK || out != "rolled back" {
		t.Fatalf("undo: %d %s", code, out)
	}
	for range 3 {
		r.now = r.now.Add(time.Second)
		r.pass()
		r.report(seqs, good)
	}
	d = deployment()
	if d.Spec.Template.Spec.Containers[0].Image != "process:///v1" || d.Generation != 3 || d.Status.UpdatedReplicas != 3 || d.Status.Replicas != 3 ||
		d.Annotations["deployment.kubernetes.io/revision"] != "3" {
		t.Fatalf("after undo: image %s, generation %d, status %+v, revision %s", d.Spec.Template.Spec.Containers[0].Image, d.Generation, d.Status,
			d.Annotations["deployment.kubernetes.io/revision"])
	}
	if code, out := rollout(t, url, "pause", api.RolloutRequest{}); code != http.StatusOK || out != "paused" || !deployment().Spec.Paused {
		t.Errorf("pause: %d %s", code, out)
	}
	if code, out := rollout(t, url, "restart", api.RolloutRequest{}); code == http.StatusOK || !strings.Contains(out, "paused") {
		t.Errorf("restart of a paused deployment: %d %s", code, out)
	}
	if code, out := rollout(t, url, "resume", api.RolloutRequest{}); code != http.StatusOK || out != "resumed" {
		t.Errorf("resume: %d %s", code, out)
	}
	if code, out := rollout(t, url, "restart", api.RolloutRequest{}); code != http.StatusOK || out != "restarted" {
		t.Errorf("restart: %d %s", code, out)
	}
	if d := deployment(); d.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" || d.Generation != 6 {
		t.Errorf("restart: template annotations %v, generation %d; want restartedAt, generation 6", d.Spec.Template.Annotations, d.Generation)
	}
	r.pass()
	var revs2 []workloaddb.Revision
	getJSON(t, url+"/revisions", &revs2)
	if len(revs2) != 3 || revs2[2].Number != 4 {
		t.Errorf("revisions after restart %+v, want a fourth", revs2)
	}
}
