package dashboard

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/protocol"
)

var now = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// evil is what a device may report in any string it sends.
const evil = `<img src=x onerror=window.pwned=1></script><script>window.pwned=2</script>`

// rig is a real fleet database with two devices: gw-1 (zone a, Ready, a
// crash-looping pod and a running one, events, a metrics snapshot) and
// gw-2 (zone b, never heard from), and a Deployment.
type rig struct {
	t     *testing.T
	fleet *fleetdb.Fleet
	h     http.Handler
}

func newRig(t *testing.T) *rig {
	t.Helper()
	f, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	r := &rig{t: t, fleet: f}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.SetLabels("gw-1", map[string]string{"zone": "a", "note": "x"}))
	must(f.SetLabels("gw-2", map[string]string{"zone": "b"}))
	if _, err := f.SavePresence("gw-1", &protocol.Presence{Device: "gw-1", Online: true}, now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	node := v1.NodeStatus{
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady", Message: evil}},
		Capacity:   v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("1Gi")},
		NodeInfo:   v1.NodeSystemInfo{OSImage: "Debian " + evil, Architecture: "arm64"},
	}
	hb := &protocol.Heartbeat{Device: "gw-1", Version: "v1.2.3", Node: node, Labels: map[string]string{protocol.DeviceLabelPrefix + "model": "gw100"},
		Metrics: &protocol.MetricsSnapshot{RunningPods: 1, ContainerRestarts: 4, Pressure: &protocol.PressureSnapshot{Memory: 2.5}}}
	if _, _, err := f.SaveHeartbeat(hb, now.Add(-10*time.Second)); err != nil {
		t.Fatal(err)
	}
	created := metav1.NewTime(now.Add(-time.Hour))
	crash := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "crasher", CreationTimestamp: created},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "main", RestartCount: 4,
			State:                v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: evil}},
			LastTerminationState: v1.ContainerState{Terminated: &v1.ContainerStateTerminated{ExitCode: 3, FinishedAt: metav1.NewTime(now.Add(-5 * time.Second))}}}}}}
	ok := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "agent", CreationTimestamp: created},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.0.0.7", ContainerStatuses: []v1.ContainerStatus{{Name: "main", Ready: true,
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}}
	batch := &protocol.StatusBatch{Device: "gw-1", Epoch: "e1", Items: []protocol.StatusItem{
		{Seq: 1, Key: "default/crasher", Pod: crash},
		{Seq: 2, Key: "kube-system/agent", Pod: ok},
		{Seq: 3, Key: "default/crasher", Event: &protocol.Event{Time: now.Add(-time.Minute), Type: "Normal", Reason: "Started", Message: "Started container main"}},
		{Seq: 4, Key: "default/crasher", Event: &protocol.Event{Time: now.Add(-5 * time.Second), Type: "Warning", Reason: "BackOff", Message: evil}},
	}}
	if _, _, _, err := f.ApplyStatus(batch, now.Add(-5*time.Second)); err != nil {
		t.Fatal(err)
	}
	objs, err := kinds.Decode("web.yaml", []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  paused: true
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      runtimeClassName: process
      containers: [{name: web, image: host, command: [sleep, "1000"]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	wl := workloaddb.New(f.SQL())
	must(wl.ApplyObjects(objs, now.Add(-2*time.Hour)))
	r.h = New(Config{Fleet: f, Workloads: wl, Timeout: time.Minute, Now: func() time.Time { return now }})
	return r
}

// get answers a GET of path, and the body.
func (r *rig) get(path string) (*http.Response, string) {
	r.t.Helper()
	rec := httptest.NewRecorder()
	r.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	return rec.Result(), rec.Body.String()
}

// getJSON decodes a 200 answer of path into v and returns the raw body.
func (r *rig) getJSON(path string, v any) string {
	r.t.Helper()
	resp, body := r.get(path)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		r.t.Fatalf("GET %s: %d %s %s", path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		r.t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
	return body
}

// No answer carries a device's markup as markup: encoding/json writes
// <, > and & as \u escapes.
func noRawMarkup(t *testing.T, what, body string) {
	t.Helper()
	if strings.Contains(body, "<script>") || strings.Contains(body, "<img") {
		t.Fatalf("%s carries a device's markup unescaped:\n%s", what, body)
	}
}

func TestDevices(t *testing.T) {
	r := newRig(t)
	var v DevicesView
	body := r.getJSON("/ui/api/devices", &v)
	noRawMarkup(t, "devices", body)
	if len(v.Devices) != 2 {
		t.Fatalf("devices %+v, want gw-1 and gw-2", v.Devices)
	}
	gw1, gw2 := v.Devices[0], v.Devices[1]
	if gw1.ID != "gw-1" || gw1.Status != "Ready" || !gw1.Ready || gw1.Version != "v1.2.3" || gw1.Pods != 2 || gw1.Seen != "5s" ||
		gw1.Labels["zone"] != "a" || gw1.Labels[protocol.DeviceLabelPrefix+"model"] != "gw100" {
		t.Fatalf("gw-1 row %+v", gw1)
	}
	if gw2.ID != "gw-2" || gw2.Status != "NotReady" || gw2.Seen != "<never>" || gw2.LastSeen != nil {
		t.Fatalf("gw-2 row %+v", gw2)
	}
	want := []string{protocol.DeviceLabelPrefix + "model", "note", "zone"}
	if strings.Join(v.LabelKeys, ",") != strings.Join(want, ",") {
		t.Fatalf("label keys %v, want %v", v.LabelKeys, want)
	}
	// Cordoned and fenced, as kubectl and podhub get devices say.
	if err := r.fleet.SetCordon("gw-2", true); err != nil {
		t.Fatal(err)
	}
	if err := r.fleet.SetFenced("gw-2", now); err != nil {
		t.Fatal(err)
	}
	r.getJSON("/ui/api/devices", &v)
	if got := v.Devices[1].Status; got != "NotReady,SchedulingDisabled,Fenced" {
		t.Fatalf("a cordoned, fenced device's status %q", got)
	}
}

func TestDevice(t *testing.T) {
	r := newRig(t)
	var v DeviceView
	body := r.getJSON("/ui/api/devices/gw-1", &v)
	noRawMarkup(t, "device", body)
	if len(v.Pods) != 2 {
		t.Fatalf("pods %+v", v.Pods)
	}
	crash := v.Pods[0]
	if crash.Name != "crasher" || crash.Ready != "0/1" || crash.Status != "CrashLoopBackOff" || crash.Restarts != "4 (5s ago)" ||
		crash.Age != "60m" || crash.Device != "gw-1" {
		t.Fatalf("crasher's row %+v, want kubectl's columns", crash)
	}
	if p := v.Pods[1]; p.Name != "agent" || p.Status != "Running" || p.Ready != "1/1" || p.IP != "10.0.0.7" {
		t.Fatalf("agent's row %+v", p)
	}
	if len(v.Events) != 2 || v.Events[0].Reason != "BackOff" || v.Events[0].Message != evil || v.Events[0].Pod != "default/crasher" ||
		v.Events[0].Age != "5s" || v.Events[1].Reason != "Started" {
		t.Fatalf("events %+v, want newest first", v.Events)
	}
	if len(v.Conditions) != 1 || v.Conditions[0].Type != "Ready" || v.Conditions[0].Message != evil {
		t.Fatalf("conditions %+v", v.Conditions)
	}
	if v.Capacity["cpu"] != "4" || v.Capacity["memory"] != "1Gi" || v.System["architecture"] != "arm64" {
		t.Fatalf("capacity %v, system %v", v.Capacity, v.System)
	}
	if v.Metrics == nil || v.Metrics.ContainerRestarts != 4 || v.Metrics.Pressure.Memory != 2.5 {
		t.Fatalf("metrics %+v", v.Metrics)
	}
	for path, code := range map[string]int{"/ui/api/devices/nope": 404, "/ui/api/devices/" + strings.Repeat("x", 300): 400,
		"/ui/api/devices/a%20b": 400, "/ui/api/nothing": 404} {
		resp, body := r.get(path)
		var e Error
		if resp.StatusCode != code || json.Unmarshal([]byte(body), &e) != nil || e.Error == "" {
			t.Errorf("GET %s: %d %s, want %d with an error", path, resp.StatusCode, body, code)
		}
	}
}

func TestPodsFilters(t *testing.T) {
	r := newRig(t)
	var all PodsView
	body := r.getJSON("/ui/api/pods", &all)
	noRawMarkup(t, "pods", body)
	// The Deployment is paused before its first pods, so the pods are the
	// two mirrors.
	if all.Total != 2 || all.Matched != 2 || all.Truncated || strings.Join(all.Namespaces, ",") != "default,kube-system" ||
		strings.Join(all.Phases, ",") != "Running" || strings.Join(all.Devices, ",") != "gw-1" {
		t.Fatalf("all pods %+v", all)
	}
	for query, want := range map[string]string{
		"namespace=kube-system":            "agent",
		"phase=Running&namespace=default":  "crasher",
		"device=gw-1&q=crashloop":          "crasher",
		"q=KUBE-SYSTEM%2Fagent":            "agent",
		"device=gw-2":                      "",
		"device=gw-1&namespace=default":    "crasher",
		"phase=Pending":                    "",
		"q=" + strings.Repeat("z", 100000): "",
	} {
		var v PodsView
		r.getJSON("/ui/api/pods?"+query, &v)
		var names []string
		for _, p := range v.Pods {
			names = append(names, p.Name)
		}
		total := 2
		if strings.Contains(query, "device=gw-2") {
			total = 0 // the chosen device's
		}
		if strings.Join(names, ",") != want || v.Matched != len(names) || v.Total != total || len(v.Devices) == 0 {
			t.Errorf("pods?%.40s: %v (matched %d of %d), want [%s]", query, names, v.Matched, v.Total, want)
		}
	}
	// A silent device's pods are Unknown, as podhub get pods says.
	late := New(Config{Fleet: r.fleet, Timeout: time.Minute, Now: func() time.Time { return now.Add(time.Hour) }})
	rec := httptest.NewRecorder()
	late.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/api/pods?phase=Unknown", nil))
	var v PodsView
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || v.Matched != 2 || v.Pods[1].Status != "NodeLost" || v.Pods[1].Ready != "0/1" {
		t.Fatalf("pods of a silent device: %v %s", err, rec.Body)
	}
}

func TestWorkloads(t *testing.T) {
	r := newRig(t)
	var v WorkloadsView
	r.getJSON("/ui/api/workloads", &v)
	if len(v.Workloads) != 1 {
		t.Fatalf("workloads %+v", v.Workloads)
	}
	w := v.Workloads[0]
	if w.Kind != "Deployment" || w.Namespace != "shop" || w.Name != "web" || w.Desired != 3 || !w.Paused || w.Halted != "" || w.Age != "120m" {
		t.Fatalf("web's row %+v", w)
	}

	// A DaemonSet whose rollout the failure threshold halted, with the
	// status its controller stored.
	objs, err := kinds.Decode("agent.yaml", []byte(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: ops}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      runtimeClassName: process
      containers: [{name: main, image: host, command: [sleep, "1000"]}]
`))
	if err != nil {
		t.Fatal(err)
	}
	wl := workloaddb.New(r.fleet.SQL())
	if err := wl.ApplyObjects(objs, now); err != nil {
		t.Fatal(err)
	}
	status := appsv1.DaemonSetStatus{DesiredNumberScheduled: 4, UpdatedNumberScheduled: 2, NumberReady: 3, NumberAvailable: 3,
		Conditions: []appsv1.DaemonSetCondition{{Type: "RolloutHalted", Status: v1.ConditionTrue, Reason: reasonRolloutHalted, Message: evil}}}
	raw, _ := json.Marshal(status)
	if err := wl.StorePods(workloaddb.PodWrites{Statuses: []workloaddb.StatusWrite{{Kind: workloaddb.KindDaemonSet, Namespace: "ops", Name: "agent", Raw: raw}}}, now); err != nil {
		t.Fatal(err)
	}
	body := r.getJSON("/ui/api/workloads", &v)
	noRawMarkup(t, "workloads", body)
	if len(v.Workloads) != 2 {
		t.Fatalf("workloads %+v", v.Workloads)
	}
	if w := v.Workloads[1]; w.Kind != "DaemonSet" || w.Name != "agent" || w.Desired != 4 || w.Updated != 2 || w.Ready != 3 || w.Available != 3 ||
		w.Halted != evil || w.Paused {
		t.Fatalf("agent's row %+v, want the halted rollout", w)
	}
}

// The dashboard serves reads only, with headers that keep the page to
// its own scripts.
func TestReadOnlyAndHeaders(t *testing.T) {
	r := newRig(t)
	for _, m := range []string{"POST", "PUT", "DELETE", "PATCH"} {
		for _, path := range []string{"/ui/", "/ui/api/devices", "/ui/api/events", "/ui/assets/app.js"} {
			rec := httptest.NewRecorder()
			r.h.ServeHTTP(rec, httptest.NewRequest(m, path, strings.NewReader("{}")))
			if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
				t.Errorf("%s %s: %d, want 405", m, path, rec.Code)
			}
		}
	}
	for path, typ := range map[string]string{"/ui/": "text/html; charset=utf-8", "/ui/assets/app.js": "text/javascript; charset=utf-8",
		"/ui/assets/dom.js": "text/javascript; charset=utf-8", "/ui/assets/views.js": "text/javascript; charset=utf-8",
		"/ui/assets/style.css": "text/css; charset=utf-8", "/ui/api/devices": "application/json"} {
		resp, body := r.get(path)
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != typ || body == "" {
			t.Errorf("GET %s: %d %q", path, resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		for k, v := range map[string]string{"Content-Security-Policy": ContentSecurityPolicy, "X-Content-Type-Options": "nosniff",
			"X-Frame-Options": "DENY", "Cache-Control": "no-store"} {
			if resp.Header.Get(k) != v {
				t.Errorf("GET %s: %s %q, want %q", path, k, resp.Header.Get(k), v)
			}
		}
	}
	for _, path := range []string{"/ui/assets/", "/ui/assets/index.html", "/ui/assets/../dashboard.go", "/ui/assets/nope.js", "/ui/index.html", "/elsewhere"} {
		// (The mux redirects a path with .. to its clean form.)
		if resp, _ := r.get(path); resp.StatusCode != 404 && resp.StatusCode != http.StatusTemporaryRedirect {
			t.Errorf("GET %s: %d, want 404", path, resp.StatusCode)
		}
	}
}

// The page's scripts put every string in as text: no markup parsing
// anywhere (so no device's string can become markup), no inline script
// or style the policy would have to allow, nothing from elsewhere.
func TestAssetsNeverParseMarkup(t *testing.T) {
	entries, err := assets.ReadDir("assets")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := assets.ReadFile("assets/" + e.Name())
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(string(data), `xmlns="http://www.w3.org/2000/svg"`, "")
		for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
			"setAttribute('on", "http://", "https://", "//cdn", "style=", "javascript:"} {
			if strings.Contains(text, bad) {
				t.Errorf("%s contains %q", e.Name(), bad)
			}
		}
		if strings.HasSuffix(e.Name(), ".html") && strings.Contains(strings.ReplaceAll(text, `<script type="module" src=`, ""), "<script") {
			t.Errorf("%s has an inline script", e.Name())
		}
	}
}

func TestChangeOf(t *testing.T) {
	c := changeOf([]fleetwatch.Change{{Device: "b", What: fleetwatch.Node}, {Device: "a", What: fleetwatch.Pods | fleetwatch.Events}, {What: fleetwatch.Workloads}})
	if strings.Join(c.Devices, ",") != "a,b" || !c.Pods || !c.Workloads || c.All {
		t.Fatalf("change %+v", c)
	}
	var many []fleetwatch.Change
	for i := 0; i < maxNamedDevices+1; i++ {
		many = append(many, fleetwatch.Change{Device: strings.Repeat("d", i+1), What: fleetwatch.Node})
	}
	if c := changeOf(many); !c.All || c.Devices != nil || c.Pods {
		t.Fatalf("a change of %d devices: %+v, want All", len(many), c)
	}
	// The other replicas' changes were lost for a while: everything.
	if c := changeOf([]fleetwatch.Change{{Device: "a", What: fleetwatch.Node}, {What: fleetwatch.Everything}}); !c.All || !c.Pods || !c.Workloads || c.Devices != nil {
		t.Fatalf("an Everything change: %+v, want All, Pods and Workloads", c)
	}
}

// The live stream tells of a device's change at once, and streams are
// bounded.
func TestLiveStream(t *testing.T) {
	r := newRig(t)
	r.h = New(Config{Fleet: r.fleet, Timeout: time.Minute, MaxStreams: 1, Heartbeat: time.Hour})
	srv := httptest.NewServer(r.h)
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/ui/api/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		buf := make([]byte, 4096)
		var pending string
		for {
			n, err := resp.Body.Read(buf)
			pending += string(buf[:n])
			for {
				i := strings.Index(pending, "\n\n")
				if i < 0 {
					break
				}
				lines <- pending[:i]
				pending = pending[i+2:]
			}
			if err != nil {
				return
			}
		}
	}()
	next := func(what string) string {
		t.Helper()
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("the stream ended waiting for %s", what)
			}
			return l
		case <-time.After(10 * time.Second):
			t.Fatalf("no %s within 10s", what)
		}
		return ""
	}
	if hello := next("the stream's first comment"); !strings.HasPrefix(hello, "retry: 2000\n") {
		t.Fatalf("first message %q", hello)
	}
	second, err := http.Get(srv.URL + "/ui/api/events")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, second.Body)
	second.Body.Close()
	if second.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a stream over the bound: %d, want 503", second.StatusCode)
	}
	if err := r.fleet.SetLabels("gw-2", map[string]string{"zone": "c"}); err != nil {
		t.Fatal(err)
	}
	if ev := next("gw-2's change"); ev != "event: change\ndata: {\"devices\":[\"gw-2\"]}" {
		t.Fatalf("event %q, want gw-2's change", ev)
	}
}
