package hub_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/devicelink"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/workloadfile"
)

var fleetYAML = workloadfile.File(
	workloadfile.PriorityClass("important", 1000),
	workloadfile.DaemonSet("agent", `containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]`),
	workloadfile.Deployment("bridge", 3, `
priorityClassName: important
tolerations:
- {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 20}`,
		workloadfile.Spread("zone", "bridge"), `
containers:
- name: c
  image: "process:///bin/sleep"
  args: ["1000"]
  resources: {requests: {cpu: 100m, memory: 64Mi}}`))

// schedRig is a hub with a fake clock over a real fleet database, not
// connected to a broker: passes are run by hand.
type schedRig struct {
	t     testing.TB
	fleet *fleetdb.Fleet
	hub   *hub.Hub
	now   time.Time
}

func newSchedRig(t testing.TB, devices map[string]string) *schedRig {
	r := &schedRig{t: t, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var err error
	if r.fleet, err = fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.fleet.Close() })
	_, priv, _ := ed25519.GenerateKey(nil)
	r.hub = hub.New(hub.Config{Broker: "mqtt://127.0.0.1:1", Key: priv, DeviceTimeout: 30 * time.Second,
		Now: func() time.Time { return r.now }}, r.fleet, quiet())
	for id, zone := range devices {
		if err := r.fleet.SetLabels(id, map[string]string{"zone": zone}); err != nil {
			t.Fatal(err)
		}
		r.heartbeat(id)
	}
	return r
}

func (r *schedRig) heartbeat(id string) {
	r.t.Helper()
	node := v1.NodeStatus{
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")},
		Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
		NodeInfo:    v1.NodeSystemInfo{Architecture: "arm64", OperatingSystem: "linux"},
	}
	if _, err := r.fleet.SavePresence(id, &protocol.Presence{Device: id, Online: true}, r.now); err != nil {
		r.t.Fatal(err)
	}
	if _, _, err := r.fleet.SaveHeartbeat(&protocol.Heartbeat{Device: id, Time: r.now, Node: node}, r.now); err != nil {
		r.t.Fatal(err)
	}
}

func (r *schedRig) apply(yaml string) {
	r.t.Helper()
	objs, err := kinds.Decode("fleet.yaml", []byte(yaml))
	if err != nil {
		r.t.Fatal(err)
	}
	if err := r.hub.Workloads().ApplyObjects(objs, r.now); err != nil {
		r.t.Fatal(err)
	}
}

func (r *schedRig) pass() time.Time {
	r.t.Helper()
	next, err := r.hub.SchedulePass()
	if err != nil {
		r.t.Fatal(err)
	}
	return next
}

// placed maps each live pod's app label to its devices, and lists the
// terminating pods as app@device.
func (r *schedRig) placed() (live map[string][]string, terminating []string) {
	r.t.Helper()
	pods, err := r.hub.Workloads().HubPods()
	if err != nil {
		r.t.Fatal(err)
	}
	live = map[string][]string{}
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			terminating = append(terminating, p.Labels["app"]+"@"+p.Spec.NodeName)
			continue
		}
		live[p.Labels["app"]] = append(live[p.Labels["app"]], p.Spec.NodeName)
	}
	return live, terminating
}

// desired decodes a device's desired document as the device does, and
// returns the app labels of the pods it would run.
func (r *schedRig) desired(id string) []string {
	r.t.Helper()
	d, err := r.fleet.Desired(id)
	if err != nil {
		r.t.Fatal(err)
	}
	decoded, results := protocol.DecodePods(&protocol.Desired{Device: id, Generation: d.Generation, Pods: d.Pods}, manifest.Decode)
	for _, res := range results {
		if !res.Accepted {
			r.t.Fatalf("device %s would refuse pod %s: %s", id, res.Name, res.Reason)
		}
	}
	var apps []string
	for _, p := range decoded {
		if p.Spec.NodeName != id || len(p.OwnerReferences) != 1 {
			r.t.Errorf("device %s: pod %s has nodeName %q, owners %v", id, p.Name, p.Spec.NodeName, p.OwnerReferences)
		}
		apps = append(apps, p.Labels["app"])
	}
	return apps
}

func zonesOf(devs []string) string {
	zone := map[string]string{"d1": "a", "d2": "b", "d3": "c", "d4": "a"}
	var zs []string
	for _, d := range devs {
		zs = append(zs, zone[d])
	}
	return strings.Join(sortedCopy(zs), ",")
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestSchedulePassPlacesReplacesAndForgets(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c", "d4": "a"})
	r.apply(fleetYAML)
	next := r.pass()
	live, term := r.placed()
	if got := strings.Join(sortedCopy(live["agent"]), ","); got != "d1,d2,d3,d4" {
		t.Fatalf("DaemonSet pods on %q, want one on each device", got)
	}
	if got := zonesOf(live["bridge"]); got != "a,b,c" {
		t.Fatalf("Deployment pods in zones %q (devices %v), want one per zone", got, live["bridge"])
	}
	if len(term) != 0 {
		t.Fatalf("terminating after the first pass: %v", term)
	}
	if want := r.now.Add(30 * time.Second); !next.Equal(want) {
		t.Errorf("next pass at %v, want %v (when the devices go stale)", next, want)
	}
	lost := live["bridge"][0]
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		apps := r.desired(id)
		if len(apps) == 0 || apps[0] != "agent" && apps[len(apps)-1] != "agent" {
			t.Errorf("device %s desired %v, want the agent", id, apps)
		}
	}

	// The bridge pods carry their PriorityClass; the device resolves it.
	d0, _ := r.fleet.Desired(live["bridge"][0])
	resolvedHub := false
	for _, raw := range d0.Pods {
		var p v1.Pod
		json.Unmarshal(raw, &p)
		if p.Labels["app"] != "bridge" {
			continue
		}
		if err := priority.Builtin().ResolveHub(&p); err != nil || *p.Spec.Priority != 1000 {
			t.Fatalf("the device resolves bridge's priority to %v: %v (annotations %v)", p.Spec.Priority, err, p.Annotations)
		}
		resolvedHub = true
	}
	if !resolvedHub {
		t.Fatalf("no bridge pod in %s's document", live["bridge"][0])
	}

	// A steady pass changes no desired document.
	gens := map[string]int64{}
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		d, _ := r.fleet.Desired(id)
		gens[id] = d.Generation
	}
	r.now = r.now.Add(time.Second)
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		r.heartbeat(id)
	}
	r.pass()
	for id, g := range gens {
		if d, _ := r.fleet.Desired(id); d.Generation != g {
			t.Errorf("device %s: generation %d after a steady pass, want %d", id, d.Generation, g)
		}
	}

	// The device of one bridge pod goes silent: the others heartbeat on.
	// Before the toleration (20 s) nothing moves; after it, the pod is
	// replaced in its zone's other device or elsewhere, the agent stays.
	r.now = r.now.Add(time.Second)
	silentSince := r.now // the offline presence is the last word heard
	if _, err := r.fleet.SavePresence(lost, &protocol.Presence{Device: lost, Online: false}, r.now); err != nil {
		t.Fatal(err)
	}
	next = r.pass()
	if want := silentSince.Add(20 * time.Second); !next.Equal(want) {
		t.Errorf("next pass at %v, want %v (the toleration's end)", next, want)
	}
	if _, term = r.placed(); len(term) != 0 {
		t.Fatalf("terminating %v within the toleration", term)
	}
	r.now = r.now.Add(20 * time.Second)
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		if id != lost {
			r.heartbeat(id)
		}
	}
	r.pass()
	live, term = r.placed()
	if len(term) != 1 || term[0] != "bridge@"+lost {
		t.Fatalf("terminating %v, want the bridge pod of %s", term, lost)
	}
	if len(live["bridge"]) != 3 || strings.Contains(strings.Join(live["bridge"], ","), lost) {
		t.Fatalf("bridge pods on %v, want 3 away from %s", live["bridge"], lost)
	}
	if len(live["agent"]) != 4 {
		t.Fatalf("agent pods on %v: the DaemonSet pod of %s must not move", live["agent"], lost)
	}
	if apps := r.desired(lost); len(apps) != 1 || apps[0] != "agent" {
		t.Errorf("lost device %s desired %v, want only the agent", lost, apps)
	}
	pods, _ := r.hub.Workloads().HubPods()
	for _, p := range pods {
		if p.DeletionTimestamp != nil && p.Status.Reason != "NodeLost" {
			t.Errorf("terminating pod %s: reason %q, want NodeLost", p.Name, p.Status.Reason)
		}
	}

	// It stays Terminating until the device confirms: it comes back and
	// acknowledges the document without the pod.
	r.pass()
	if _, term = r.placed(); len(term) != 1 {
		t.Fatalf("terminating %v before the device confirmed", term)
	}
	r.heartbeat(lost)
	d, _ := r.fleet.Desired(lost)
	if _, err := r.fleet.SaveAck(&protocol.Ack{Device: lost, Generation: d.Generation, ObservedGeneration: d.Generation}, r.now); err != nil {
		t.Fatal(err)
	}
	r.pass()
	if _, term = r.placed(); len(term) != 0 {
		t.Fatalf("terminating %v after the device confirmed", term)
	}

	// Deleting the Deployment terminates its pods on their devices.
	if err := r.hub.Workloads().DeleteWorkload(workloaddb.KindDeployment, "default", "bridge"); err != nil {
		t.Fatal(err)
	}
	r.pass()
	live, term = r.placed()
	if len(live["bridge"]) != 0 || len(term) != 3 {
		t.Fatalf("after deleting the Deployment: live %v, terminating %v", live["bridge"], term)
	}
	for _, id := range []string{"d1", "d2", "d3", "d4"} {
		if apps := r.desired(id); len(apps) != 1 {
			t.Errorf("device %s desired %v after the delete, want only the agent", id, apps)
		}
	}
}

func TestSchedulePassPendingCordonTaint(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b"})
	if err := r.fleet.SetCordon("d1", true); err != nil {
		t.Fatal(err)
	}
	if err := r.fleet.SetTaint("d2", v1.Taint{Key: "dedicated", Value: "x", Effect: v1.TaintEffectNoSchedule}, false, r.now); err != nil {
		t.Fatal(err)
	}
	if err := r.fleet.SetTaint("d2", v1.Taint{Key: "node.kubernetes.io/unreachable", Effect: v1.TaintEffectNoSchedule}, false, r.now); err == nil {
		t.Error("an operator set a node.kubernetes.io/ taint")
	}
	r.apply(`
apiVersion: v1
kind: Pod
metadata: {name: lonely, labels: {app: lonely}}
spec:
  containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]
`)
	r.pass()
	r.pass() // a second identical pass counts the event, not another one
	pods, _ := r.hub.Workloads().HubPods()
	if len(pods) != 1 || pods[0].Spec.NodeName != "" {
		t.Fatalf("pods %v, want one pending", pods)
	}
	c := pods[0].Status.Conditions
	if len(c) != 1 || c[0].Type != v1.PodScheduled || c[0].Status != v1.ConditionFalse ||
		!strings.Contains(c[0].Message, "0/2 devices are available") || !strings.Contains(c[0].Message, "dedicated") ||
		!strings.Contains(c[0].Message, "unschedulable") {
		t.Fatalf("PodScheduled %+v, want False naming the cordon and the taint", c)
	}
	evs, err := r.hub.Workloads().ObjectEvents("Pod", "default", "lonely")
	if err != nil || len(evs) != 1 || evs[0].Reason != "FailedScheduling" || evs[0].Count != 2 {
		t.Fatalf("events %+v (%v), want one FailedScheduling counted twice", evs, err)
	}

	// Untainting d2 places it there.
	if err := r.fleet.SetTaint("d2", v1.Taint{Key: "dedicated"}, true, r.now); err != nil {
		t.Fatal(err)
	}
	r.pass()
	pods, _ = r.hub.Workloads().HubPods()
	if pods[0].Spec.NodeName != "d2" {
		t.Fatalf("pod on %q after the untaint, want d2", pods[0].Spec.NodeName)
	}
	var raw struct{ Metadata metav1.ObjectMeta }
	d, _ := r.fleet.Desired("d2")
	if len(d.Pods) != 1 || json.Unmarshal(d.Pods[0], &raw) != nil || raw.Metadata.Annotations[devicelink.AnnotationScheduled] != "true" {
		t.Fatalf("d2 desired %s", d.Pods)
	}
}

// Bad input through the API: refused whole, naming the file, document
// and field, and nothing already stored is disturbed; a selector that
// matches no device leaves the pod Pending with the scheduler's reason.
func TestApplyObjectsBadInput(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a"})
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	post := func(file, data string) (int, string) {
		body, _ := json.Marshal(api.ObjectsRequest{File: file, Data: []byte(data)})
		resp, err := http.Post(srv.URL+"/v1/objects", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(out)
	}
	if code, out := post("fleet.yaml", fleetYAML); code != http.StatusOK {
		t.Fatalf("a good file: %d %s", code, out)
	}
	for _, c := range []struct{ data, want string }{
		{"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\n", "StatefulSet"},
		{strings.Replace(fleetYAML, "replicas: 3", "replicas: 3\n  replicaz: 1", 1), "replicaz"},
		{strings.Replace(fleetYAML, "app: bridge}}\n  template", "app: other}}\n  template", 1), "selector"},
	} {
		code, out := post("bad.yaml", c.data)
		if code != http.StatusBadRequest || !strings.Contains(out, "bad.yaml: document") || !strings.Contains(out, c.want) {
			t.Errorf("bad file naming %q: %d %s", c.want, code, out)
		}
	}
	// Each file is valid, but together they ask for more pods than the
	// hub keeps: the one that passes the bound is refused whole.
	many := func(name string) string {
		return strings.NewReplacer("name: bridge", "name: "+name, "replicas: 3", "replicas: 99000",
			"name: agent", "name: agent-"+name, "name: important", "name: important-"+name).Replace(fleetYAML)
	}
	for _, name := range []string{"b1", "b2"} {
		if code, out := post(name+".yaml", many(name)); code != http.StatusOK {
			t.Fatalf("%s: %d %s", name, code, out)
		}
	}
	if code, out := post("b3.yaml", many("b3")); code != http.StatusBadRequest || !strings.Contains(out, "replicas in all") {
		t.Errorf("a third 99000-replica Deployment: %d %s", code, out)
	}
	for _, name := range []string{"b1", "b2"} {
		r.hub.Workloads().DeleteWorkload(workloaddb.KindDeployment, "default", name)
		r.hub.Workloads().DeleteWorkload(workloaddb.KindDaemonSet, "default", "agent-"+name)
		r.hub.Workloads().DeleteWorkload(workloaddb.KindPriorityClass, "", "important-"+name)
	}
	w, _ := r.hub.Workloads().LoadWorkloads()
	if len(w.Deployments) != 1 || *w.Deployments[0].Spec.Replicas != 3 || len(w.DaemonSets) != 1 {
		t.Fatalf("stored workloads changed by refused files: %+v", w)
	}
	r.apply(workloadfile.Deployment("nowhere", -1, `
nodeSelector: {zone: mars}
containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]`))
	r.pass()
	pods, _ := r.hub.Workloads().HubPods()
	found := false
	for _, p := range pods {
		if p.Labels["app"] != "nowhere" {
			continue
		}
		found = true
		if p.Spec.NodeName != "" || len(p.Status.Conditions) == 0 ||
			!strings.Contains(p.Status.Conditions[0].Message, "didn't match Pod's node affinity/selector") {
			t.Errorf("pod %s on %q, conditions %+v: want Pending naming the selector", p.Name, p.Spec.NodeName, p.Status.Conditions)
		}
	}
	if !found {
		t.Fatal("no pod made for the Deployment")
	}
}

// A bare pod the hub placed is deleted gracefully through the API, and a
// pod of the same name applied by hand to a device is refused.
func TestDeleteHubPodAndNoClash(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a"})
	r.apply(`apiVersion: v1
kind: Pod
metadata: {name: solo, labels: {app: solo}}
spec:
  containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]
`)
	r.pass()
	srv := httptest.NewServer(r.hub.API(30 * time.Second).Handler())
	defer srv.Close()
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"solo"},"spec":{"containers":[{"name":"c","image":"process:///bin/sleep"}]}}`)
	body, _ := json.Marshal(api.ApplyRequest{Device: "d1", Pods: []json.RawMessage{pod}})
	resp, err := http.Post(srv.URL+"/v1/apply", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(out), "default/solo is scheduled by the hub") {
		t.Fatalf("a hand-applied pod clashing with a scheduled one: %d %s", resp.StatusCode, out)
	}
	req, _ := http.NewRequest("DELETE", srv.URL+"/v1/pods/default/solo", nil)
	if resp, err = http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("delete: %v %v", err, resp)
	}
	resp.Body.Close()
	r.pass()
	if _, term := r.placed(); len(term) != 1 || term[0] != "solo@d1" {
		t.Fatalf("terminating %v, want solo on d1", term)
	}
	if apps := r.desired("d1"); len(apps) != 0 {
		t.Fatalf("d1 desired %v after the delete, want nothing", apps)
	}
}

// A hub that comes up after a long downtime finds every device offline
// (ForgetPresence) and long silent; it gives each a full timeout to be
// heard before counting the silence, as the node lifecycle controller
// does after a restart: nothing is evicted as it starts.
func TestScheduleAfterHubDowntimeEvictsNothingAtOnce(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b", "d3": "c"})
	r.apply(fleetYAML)
	r.pass()
	// Down for an hour; up again, with a new hub on the same database.
	r.now = r.now.Add(time.Hour)
	if err := r.fleet.ForgetPresence(); err != nil {
		t.Fatal(err)
	}
	_, priv, _ := ed25519.GenerateKey(nil)
	r.hub = hub.New(hub.Config{Broker: "mqtt://127.0.0.1:1", Key: priv, DeviceTimeout: 30 * time.Second,
		Now: func() time.Time { return r.now }}, r.fleet, quiet())
	next := r.pass()
	if _, term := r.placed(); len(term) != 0 {
		t.Fatalf("evicted at the hub's start: %v", term)
	}
	if want := r.now.Add(30 * time.Second); !next.Equal(want) {
		t.Errorf("next pass at %v, want %v (the end of the grace)", next, want)
	}
	// d1 and d2 come back; d3 stays silent past the grace and its
	// toleration (20 s): only its bridge pod is replaced.
	r.now = r.now.Add(10 * time.Second)
	r.heartbeat("d1")
	r.heartbeat("d2")
	r.pass()
	r.now = r.now.Add(45 * time.Second)
	r.heartbeat("d1")
	r.heartbeat("d2")
	r.pass()
	live, term := r.placed()
	if len(term) != 1 || term[0] != "bridge@d3" || len(live["agent"]) != 3 {
		t.Fatalf("terminating %v, live %v: want only d3's bridge pod going", term, live)
	}
}
