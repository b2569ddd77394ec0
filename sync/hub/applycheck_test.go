package hub_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
)

// applyErr applies a file and returns the refusal, if any.
func (r *schedRig) applyErr(yaml string) error {
	r.t.Helper()
	objs, err := kinds.Decode("fleet.yaml", []byte(yaml))
	if err != nil {
		r.t.Fatal(err)
	}
	return r.hub.Workloads().ApplyObjects(objs, r.now)
}

const barePod = "apiVersion: v1\nkind: Pod\nmetadata: {name: solo}\nspec:\n  containers: [{name: c, image: \"process:///bin/sleep\", args: [\"1000\"]}]\n"

// What the API server refuses against stored objects is refused, naming
// the file, the document, the object and the field; nothing of a
// refused file is kept.
func TestApplyRefusesAsTheAPIServer(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a"})
	r.apply(fleetYAML)
	for _, c := range []struct{ name, file, want string }{
		{"deployment selector", strings.ReplaceAll(fleetYAML, "app: bridge}", "app: bridge, tier: x}"),
			`fleet.yaml: document 3: Deployment default/bridge: spec.selector: Invalid value: `},
		{"daemonset selector", strings.ReplaceAll(fleetYAML, "app: agent}", "app: agent2}"),
			`fleet.yaml: document 2: DaemonSet default/agent: spec.selector: Invalid value: `},
		{"class value", strings.Replace(fleetYAML, "value: 1000", "value: 2000", 1),
			`fleet.yaml: document 1: PriorityClass important: value: Forbidden: may not be changed in an update.`},
		{"class preemptionPolicy", strings.Replace(fleetYAML, "value: 1000", "value: 1000\npreemptionPolicy: Never", 1),
			`fleet.yaml: document 1: PriorityClass important: preemptionPolicy: Invalid value: "Never": field is immutable`},
		{"two defaults", "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: a}\nvalue: 5\nglobalDefault: true\n---\n" +
			"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: b}\nvalue: 6\nglobalDefault: true\n",
			`fleet.yaml: document 2: PriorityClass b: globalDefault: Forbidden: PriorityClass a is already marked as default. Only one default can exist`},
		{"pod priority without class", strings.Replace(barePod, "spec:\n", "spec:\n  priority: 2000001000\n", 1),
			`fleet.yaml: document 1: Pod default/solo: pods "solo" is forbidden: the integer value of priority (2000001000) must not be provided in pod spec; priority admission controller computed 0 from the given PriorityClass name`},
		{"pod priority above its class", fleetYAML + "---\n" + strings.Replace(barePod, "spec:\n", "spec:\n  priorityClassName: important\n  priority: 5000\n", 1),
			`computed 1000 from the given PriorityClass name`},
		{"pod priority of an unknown class", strings.Replace(barePod, "spec:\n", "spec:\n  priorityClassName: gold\n  priority: 5000\n", 1),
			`pods "solo" is forbidden: no PriorityClass with name gold was found`},
		{"pod preemptionPolicy", fleetYAML + "---\n" + strings.Replace(barePod, "spec:\n", "spec:\n  priorityClassName: important\n  preemptionPolicy: Never\n", 1),
			`the string value of PreemptionPolicy (Never) must not be provided in pod spec; priority admission controller computed PreemptLowerPriority from the given PriorityClass name`},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := r.applyErr(c.file)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, c.want)
			}
		})
	}
	w, err := r.hub.Workloads().LoadWorkloads()
	if err != nil {
		t.Fatal(err)
	}
	if len(w.PriorityClasses) != 1 || w.PriorityClasses[0].Value != 1000 || w.PriorityClasses[0].GlobalDefault {
		t.Errorf("classes changed by refused files: %+v", w.PriorityClasses)
	}
	if pods, _ := r.hub.Workloads().HubPods(); len(pods) != 0 {
		t.Errorf("%d pods stored by refused files", len(pods))
	}
	// What the class gives may be said again; the default may move once
	// it is free, and a class stays the default when applied again.
	ok := []string{
		fleetYAML + "---\n" + strings.Replace(barePod, "spec:\n", "spec:\n  priorityClassName: important\n  priority: 1000\n  preemptionPolicy: PreemptLowerPriority\n", 1),
		"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: a}\nvalue: 5\nglobalDefault: true\n",
		"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: a}\nvalue: 5\nglobalDefault: true\ndescription: again\n",
		strings.Replace(strings.Replace(barePod, "solo", "solo2", 1), "spec:\n", "spec:\n  priority: 5\n", 1),
	}
	for i, file := range ok {
		if err := r.applyErr(file); err != nil {
			t.Errorf("file %d: %v", i, err)
		}
	}
}

// A file copied from `kubectl get -o yaml` carries what the API server
// owns: a deletion timestamp, a status, a generation, a creation time.
// The hub sets them itself, so the pod is scheduled (not left pending and
// terminating for ever) and the Deployment counts its generations.
func TestApplySetsServerFields(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b"})
	copied := `apiVersion: v1
kind: Pod
metadata:
  name: copied
  uid: 11111111-2222-3333-4444-555555555555
  resourceVersion: "42"
  creationTimestamp: "2020-01-01T00:00:00Z"
  deletionTimestamp: "2020-01-02T00:00:00Z"
  deletionGracePeriodSeconds: 30
spec:
  nodeName: d2
  containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]
status:
  phase: Running
  nominatedNodeName: d2
`
	r.apply(copied)
	deployment := strings.Replace(fleetYAML, "metadata: {name: bridge}",
		"metadata: {name: bridge, generation: 7, deletionTimestamp: \"2020-01-02T00:00:00Z\"}", 1)
	r.apply(deployment)
	pods, err := r.hub.Workloads().HubPods()
	if err != nil || len(pods) != 1 {
		t.Fatalf("pods %v, %v", pods, err)
	}
	p := pods[0]
	if p.DeletionTimestamp != nil || p.DeletionGracePeriodSeconds != nil || p.ResourceVersion != "" ||
		p.Status.Phase != "" || p.Status.NominatedNodeName != "" || !p.CreationTimestamp.Time.Equal(r.now) ||
		p.UID == "11111111-2222-3333-4444-555555555555" || p.Spec.NodeName != "" {
		t.Errorf("stored pod keeps what the file said of it: %+v", p.ObjectMeta)
	}
	generation := func() (int64, string) {
		t.Helper()
		w, err := r.hub.Workloads().LoadWorkloads()
		if err != nil || len(w.Deployments) != 1 {
			t.Fatalf("%+v %v", w, err)
		}
		d := w.Deployments[0]
		if d.DeletionTimestamp != nil || !d.CreationTimestamp.Time.Equal(r.now) {
			t.Errorf("deployment metadata %+v", d.ObjectMeta)
		}
		return d.Generation, string(d.UID)
	}
	if g, _ := generation(); g != 1 {
		t.Errorf("generation %d on create, want 1", g)
	}
	_, uid := generation()
	r.apply(deployment)
	if g, u := generation(); g != 1 || u != uid {
		t.Errorf("the same spec again: generation %d uid %s, want 1 and %s", g, u, uid)
	}
	r.apply(strings.Replace(deployment, "replicas: 3", "replicas: 2", 1))
	if g, u := generation(); g != 2 || u != uid {
		t.Errorf("a new spec: generation %d uid %s, want 2 and %s", g, u, uid)
	}
	r.pass()
	live, terminating := r.placed()
	if len(terminating) != 0 || len(live[""]) != 1 || live[""][0] == "" {
		t.Errorf("the copied pod: live %v, terminating %v; want it placed", live, terminating)
	}
}

// A pod applied to a device by hand may not carry the scheduler's mark:
// the next pass would take it off the device as one of its own.
func TestHandAppliedPodMayNotClaimTheSchedulersMark(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a"})
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"mine","annotations":{"podvisor.io/scheduled":"true"}},` +
		`"spec":{"containers":[{"name":"c","image":"process:///bin/sleep"}]}}`)
	_, err := r.hub.Apply("d1", []json.RawMessage{pod})
	if err == nil || !strings.Contains(err.Error(), `pod "mine": metadata.annotations[podvisor.io/scheduled]: Forbidden`) {
		t.Fatalf("got %v, want the annotation refused", err)
	}
}

// The events of a pod or workload the hub forgets go with it: pod names
// are new with every replica, so kept events would grow without bound.
func TestForgottenObjectsTakeTheirEvents(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a"})
	r.apply(strings.Replace(barePod, "spec:\n", "spec:\n  nodeSelector: {zone: mars}\n", 1))
	r.apply(strings.Replace(fleetYAML, "zone, whenUnsatisfiable", "mars, whenUnsatisfiable", 1))
	r.pass()
	events := func(kind, ns, name string) int {
		t.Helper()
		evs, err := r.hub.Workloads().ObjectEvents(kind, ns, name)
		if err != nil {
			t.Fatal(err)
		}
		return len(evs)
	}
	if events("Pod", "default", "solo") == 0 || events("DaemonSet", "default", "agent") == 0 {
		t.Fatal("no FailedScheduling event for the pending pod, or SuccessfulCreate for the DaemonSet")
	}
	if err := r.hub.Workloads().DeleteHubPod("default", "solo", r.now); err != nil {
		t.Fatal(err)
	}
	if err := r.hub.Workloads().DeleteWorkload(workloaddb.KindDaemonSet, "default", "agent"); err != nil {
		t.Fatal(err)
	}
	if n, m := events("Pod", "default", "solo"), events("DaemonSet", "default", "agent"); n != 0 || m != 0 {
		t.Errorf("%d events of the deleted pod and %d of the deleted DaemonSet kept", n, m)
	}
	// Pods a pass deletes before they were placed (the Deployment's,
	// pending for want of a zone label, scaled to 0) take theirs too.
	pods, _ := r.hub.Workloads().HubPods()
	var pending []string
	for _, p := range pods {
		if p.Labels["app"] == "bridge" {
			pending = append(pending, p.Name)
		}
	}
	if len(pending) == 0 || events("Pod", "default", pending[0]) == 0 {
		t.Fatalf("bridge pods %v without events", pending)
	}
	r.apply(strings.Replace(strings.Replace(fleetYAML, "zone, whenUnsatisfiable", "mars, whenUnsatisfiable", 1), "replicas: 3", "replicas: 0", 1))
	r.pass()
	for _, name := range pending {
		if n := events("Pod", "default", name); n != 0 {
			t.Errorf("%d events of the deleted pod %s kept", n, name)
		}
	}
}

// A Deployment's describe shows its pods' events too, the newest hundred
// of them: a large Deployment's would otherwise make the answer unbounded.
func TestDescribeDeploymentBoundsEvents(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a"})
	r.apply(strings.Replace(strings.Replace(fleetYAML, "replicas: 3", "replicas: 150", 1), "zone, whenUnsatisfiable", "mars, whenUnsatisfiable", 1))
	r.pass()
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/workloads/deployments/default/bridge")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d workloaddb.WorkloadDetail
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("describe: %d %v", resp.StatusCode, err)
	}
	if len(d.Events) != 100 {
		t.Errorf("%d events described, want the newest 100", len(d.Events))
	}
}

// During a rollout a Deployment's replicas are all its pods and only the
// new template's are up to date, as kubectl get deployments shows them.
func TestDeploymentStatusDuringRollout(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	rolling := strings.Replace(fleetYAML, "replicas: 3", "replicas: 3\n  strategy: {rollingUpdate: {maxSurge: 1, maxUnavailable: 0}}", 1)
	r.apply(rolling)
	r.pass()
	r.apply(strings.Replace(rolling, `args: ["1000"]`, `args: ["2000"]`, 2))
	r.pass()
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/workloads/deployments")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list []appsv1.Deployment
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || len(list) != 1 {
		t.Fatalf("list: %v %v", list, err)
	}
	// No device has reported a pod Ready: none is ready or available.
	if st := list[0].Status; st.Replicas != 4 || st.UpdatedReplicas != 1 || st.ObservedGeneration != 2 || st.ReadyReplicas != 0 || st.UnavailableReplicas != 4 {
		t.Errorf("status %+v: want 4 replicas (3 old, 1 surge), 1 up to date, generation 2 observed, none ready, 4 unavailable", st)
	}
}

// A bare pod is admitted at apply as the Priority plugin admits it: its
// class's value and policy (or the global default's, named on the pod),
// kept when the class goes.
func TestBarePodPriorityFixedAtApply(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a"})
	r.apply(fleetYAML + "---\n" + strings.Replace(barePod, "spec:\n", "spec:\n  priorityClassName: important\n", 1))
	r.apply("apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 5\nglobalDefault: true\npreemptionPolicy: Never\n---\n" +
		strings.Replace(barePod, "solo", "plain", 1))
	if err := r.hub.Workloads().DeleteWorkload(workloaddb.KindPriorityClass, "", "important"); err != nil {
		t.Fatal(err)
	}
	pods, err := r.hub.Workloads().HubPods()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, p := range pods {
		if p.Spec.Priority != nil && p.Spec.PreemptionPolicy != nil {
			got[p.Name] = fmt.Sprintf("%s %d %s", p.Spec.PriorityClassName, *p.Spec.Priority, *p.Spec.PreemptionPolicy)
		}
	}
	if got["solo"] != "important 1000 PreemptLowerPriority" || got["plain"] != "low 5 Never" {
		t.Errorf("admitted priorities %v", got)
	}
}
