package hub_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/schedule/disruption"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/workloadfile"
)

const webBudget = `
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: web}
spec:
  minAvailable: 2
  selector: {matchLabels: {app: web}}
`

var budgetedWeb = workloadfile.File(workloadfile.Deployment("web", 3, "",
	`containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]`)) + "---" + webBudget

// storedPDB reads the budget as the hub stores it.
func (r *schedRig) storedPDB(name string) *policyv1.PodDisruptionBudget {
	r.t.Helper()
	w, err := r.hub.Workloads().LoadWorkloads()
	if err != nil {
		r.t.Fatal(err)
	}
	for _, pdb := range w.PDBs {
		if pdb.Name == name {
			return pdb
		}
	}
	r.t.Fatalf("no budget %s", name)
	return nil
}

// reportReady has each pod's device report it Running and Ready.
func (r *schedRig) reportReady(pods []*v1.Pod) {
	r.t.Helper()
	seq := map[string]int64{}
	for _, p := range pods {
		m := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Labels: p.Labels},
			Spec:   v1.PodSpec{NodeName: p.Spec.NodeName},
			Status: v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}}}}
		dev := p.Spec.NodeName
		b := &protocol.StatusBatch{Device: dev, Epoch: "e1", After: seq[dev],
			Items: []protocol.StatusItem{{Seq: seq[dev] + 1, Key: p.Namespace + "/" + p.Name, Pod: m}}}
		if _, _, _, err := r.fleet.ApplyStatus(b, r.now); err != nil {
			r.t.Fatal(err)
		}
		seq[dev]++
	}
}

// The pass computes and stores the budget's status; evictions check it
// in one transaction under the scheduler's lock, so of many concurrent
// evictions against a budget with one disruption left exactly one wins.
func TestConcurrentEvictionsSpendOneDisruption(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	r.apply(budgetedWeb)
	r.pass()
	r.pass() // the first made the pods after the budget's sync
	pdb := r.storedPDB("web")
	st := pdb.Status
	if st.ExpectedPods != 3 || st.DesiredHealthy != 2 || st.ObservedGeneration != 1 || len(st.Conditions) != 1 {
		t.Fatalf("status after a pass: %+v", st)
	}
	pods, err := r.hub.Workloads().HubPods()
	if err != nil || len(pods) != 3 {
		t.Fatalf("pods %d %v", len(pods), err)
	}
	r.reportReady(pods)
	// Until the devices' readiness reaches the pass, the hub counts no
	// pod healthy: the budget allows nothing, and says why.
	_, err = r.hub.Evict(types.NamespacedName{Namespace: "default", Name: pods[0].Name}, nil, r.now)
	var refusal *disruption.Refusal
	if !errors.As(err, &refusal) || refusal.Code != http.StatusTooManyRequests || refusal.Budget != "web" ||
		refusal.Cause != "The disruption budget web needs 2 healthy pods and has "+itoa(st.CurrentHealthy)+" currently" {
		t.Fatalf("eviction under a spent budget: %v", err)
	}
	// One disruption allowed, as a pass with every pod ready computes.
	if _, err := r.fleet.SQL().Exec(`UPDATE workloads SET object = json_set(object, '$.status.disruptionsAllowed', 1,
		'$.status.currentHealthy', 3) WHERE kind = 'PodDisruptionBudget'`); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make([]error, 9)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, results[i] = r.hub.Evict(types.NamespacedName{Namespace: "default", Name: pods[i%3].Name}, nil, r.now)
		}()
	}
	wg.Wait()
	won := map[string]bool{}
	for i, err := range results {
		switch {
		case err == nil:
			won[pods[i%3].Name] = true
		case errors.As(err, &refusal) && refusal.Code == http.StatusTooManyRequests:
		default:
			t.Fatalf("eviction %d: %v", i, err)
		}
	}
	// An eviction of a pod already terminating succeeds again without
	// spending (canIgnorePDB), so the winners are one pod.
	if len(won) != 1 {
		t.Fatalf("%d pods evicted with one disruption allowed: %v", len(won), won)
	}
	after := r.storedPDB("web").Status
	var evicted string
	for name := range won {
		evicted = name
	}
	if after.DisruptionsAllowed != 0 || len(after.DisruptedPods) != 1 || after.DisruptedPods[evicted].Time.IsZero() {
		t.Fatalf("budget after: %+v", after)
	}
	pods, _ = r.hub.Workloads().HubPods()
	for _, p := range pods {
		if p.Name != evicted {
			if p.DeletionTimestamp != nil {
				t.Fatalf("%s deleted too", p.Name)
			}
			continue
		}
		raw, _ := json.Marshal(p.Status.Conditions)
		var target *v1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == v1.DisruptionTarget {
				target = &p.Status.Conditions[i]
			}
		}
		if p.DeletionTimestamp == nil || target == nil || target.Status != v1.ConditionTrue || target.Reason != "EvictionByEvictionAPI" ||
			target.Message != "Eviction API: evicting" {
			t.Fatalf("evicted pod: deletion %v conditions %s", p.DeletionTimestamp, raw)
		}
	}
	// The next pass takes it off its device, makes a replacement, and
	// the budget's status follows the pods (disruptedPods drops the
	// terminating pod).
	r.pass()
	if st := r.storedPDB("web").Status; st.DisruptedPods != nil || st.DisruptionsAllowed != 0 {
		t.Fatalf("status after the next pass: %+v", st)
	}
}

func itoa(n int32) string { b, _ := json.Marshal(n); return string(b) }

func httpDo(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The API lists budgets with their status, answers an eviction as the
// API server does (429 with the budget's cause; 200 once allowed), and
// get pods shows the evicted pod's DisruptionTarget.
func TestEvictionAPI(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	r.apply(budgetedWeb)
	r.pass()
	r.pass()
	a := r.hub.API(30 * time.Second)
	a.Now = func() time.Time { return r.now }
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	code, body := httpDo(t, "GET", srv.URL+"/v1/workloads/poddisruptionbudgets", "")
	var list []policyv1.PodDisruptionBudget
	if err := json.Unmarshal([]byte(body), &list); code != 200 || err != nil || len(list) != 1 || list[0].Kind != "PodDisruptionBudget" ||
		list[0].APIVersion != "policy/v1" || list[0].Status.ExpectedPods != 3 {
		t.Fatalf("list: %d %s", code, body)
	}
	pods, _ := r.hub.Workloads().HubPods()
	r.reportReady(pods)
	url := srv.URL + "/v1/pods/default/" + pods[0].Name + "/eviction"
	eviction := `{"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "` + pods[0].Name + `", "namespace": "default"}}`
	code, body = httpDo(t, "POST", url, eviction)
	if code != http.StatusTooManyRequests || !strings.Contains(body, `"error":"Cannot evict pod as it would violate the pod's disruption budget."`) ||
		!strings.Contains(body, `"budget":"web"`) || !strings.Contains(body, "The disruption budget web needs 2 healthy pods") {
		t.Fatalf("refused eviction: %d %s", code, body)
	}
	if code, body = httpDo(t, "POST", srv.URL+"/v1/pods/default/other/eviction", eviction); code != http.StatusBadRequest ||
		!strings.Contains(body, "name in URL does not match name in Eviction object") {
		t.Fatalf("name mismatch: %d %s", code, body)
	}
	if code, _ = httpDo(t, "POST", srv.URL+"/v1/pods/default/nothing/eviction", `{"metadata": {"name": "nothing"}}`); code != http.StatusNotFound {
		t.Fatalf("unknown pod: %d", code)
	}
	// describe reads the budget as the passes store it.
	if code, body = httpDo(t, "GET", srv.URL+"/v1/workloads/poddisruptionbudgets/default/web", ""); code != 200 || !strings.Contains(body, `"expectedPods":3`) {
		t.Fatalf("describe budget: %d %s", code, body)
	}
	// The budget deleted, the eviction goes through.
	if code, body = httpDo(t, "DELETE", srv.URL+"/v1/workloads/poddisruptionbudgets/default/web", ""); code != 200 {
		t.Fatalf("delete budget: %d %s", code, body)
	}
	if code, body = httpDo(t, "POST", url, eviction); code != 200 {
		t.Fatalf("eviction without a budget: %d %s", code, body)
	}
	code, body = httpDo(t, "GET", srv.URL+"/v1/pods?device="+pods[0].Spec.NodeName, "")
	var podList v1.PodList
	json.Unmarshal([]byte(body), &podList)
	found := false
	for _, p := range podList.Items {
		for _, c := range p.Status.Conditions {
			found = found || (p.Name == pods[0].Name && c.Type == v1.DisruptionTarget && c.Reason == "EvictionByEvictionAPI")
		}
	}
	if code != 200 || !found {
		t.Fatalf("get pods shows no DisruptionTarget on %s: %s", pods[0].Name, body)
	}
}

// A pod of a device the hub no longer hears from is not Ready, as the
// node lifecycle controller marks a lost node's pods: a budget that lets
// unhealthy pods go (AlwaysAllow) lets it be evicted without spending,
// where the same pod reported Ready is refused.
func TestEvictionOfALostDevicesPod(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	r.apply(strings.Replace(budgetedWeb, "minAvailable: 2", "minAvailable: 2\n  unhealthyPodEvictionPolicy: AlwaysAllow", 1))
	r.pass()
	r.pass()
	pods, _ := r.hub.Workloads().HubPods()
	r.reportReady(pods)
	key := types.NamespacedName{Namespace: "default", Name: pods[0].Name}
	var refusal *disruption.Refusal
	if _, err := r.hub.Evict(key, nil, r.now); !errors.As(err, &refusal) {
		t.Fatalf("a Ready pod under a budget with no room: %v", err)
	}
	r.now = r.now.Add(time.Minute) // past the 30 s device timeout
	p, err := r.hub.Evict(key, nil, r.now)
	if err != nil || p.DeletionTimestamp == nil {
		t.Fatalf("the lost device's pod: %v", err)
	}
	if st := r.storedPDB("web").Status; st.DisruptedPods != nil {
		t.Fatalf("an unhealthy pod's eviction was charged: %+v", st)
	}
}
