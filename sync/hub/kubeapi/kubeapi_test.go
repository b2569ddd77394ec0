package kubeapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
)

// twoDevices is the common fleet: dev1 runs web (restarted twice) and
// db, dev2 runs web too (the same manifest on two devices).
func twoDevices(t *testing.T, cfg Config) *fixture {
	f := newFixture(t, cfg)
	f.device("dev1", map[string]string{"zone": "a", "node-role.kubernetes.io/gateway": "true"})
	f.device("dev2", map[string]string{"zone": "b"})
	f.report("dev1", podItem(filePod("web", 2)), podItem(filePod("db", 0)),
		eventItem("default/web", "Warning", "BackOff", "Back-off restarting failed container main", t0.Add(-time.Minute)))
	f.report("dev2", podItem(filePod("web", 0)))
	return f
}

func TestDiscovery(t *testing.T) {
	f := newFixture(t, Config{})
	var versions metav1.APIVersions
	f.getJSON("/api", "", &versions)
	if fmt.Sprint(versions.Versions) != "[v1]" {
		t.Errorf("/api versions %v", versions.Versions)
	}
	var groups metav1.APIGroupList
	f.getJSON("/apis", "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json", &groups)
	var names []string
	for _, g := range groups.Groups {
		names = append(names, g.PreferredVersion.GroupVersion)
	}
	if got := strings.Join(names, " "); got != "apps/v1 batch/v1 autoscaling/v1 networking.k8s.io/v1 scheduling.k8s.io/v1 events.k8s.io/v1 policy/v1 coordination.k8s.io/v1 authorization.k8s.io/v1" {
		t.Errorf("/apis groups: %s", got)
	}
	var core metav1.APIResourceList
	f.getJSON("/api/v1", "", &core)
	var served []string
	for _, r := range core.APIResources {
		served = append(served, r.Name+"="+strings.Join(r.Verbs, ","))
	}
	if got := strings.Join(served, " "); got != "nodes=get,list,watch pods=get,list,watch pods/log=get events=get,list,watch namespaces=get,list,watch services=get,list,watch serviceaccounts=get,list,watch persistentvolumes=get,list,watch persistentvolumeclaims=get,list,watch" {
		t.Errorf("/api/v1 resources: %s", got)
	}
	if code, b := f.get("/api/v1/secrets", ""); code != http.StatusNotFound {
		t.Errorf("secrets: %d %s", code, b)
	}
	if code, _ := f.get("/openapi/v2", ""); code != http.StatusNotFound {
		t.Errorf("openapi: %d", code)
	}
	var v struct{ GitVersion string }
	f.getJSON("/version", "", &v)
	if v.GitVersion != "v1.37.2-podhub" {
		t.Errorf("version %q", v.GitVersion)
	}
	for in, want := range map[string]string{"": "v1.37.2+podhub", "1.4.0": "v1.37.2+podhub.1.4.0", "dev (dirty)": "v1.37.2+podhub.dev--dirty-"} {
		if got := (&Server{cfg: Config{Version: in}}).version().GitVersion; got != want {
			t.Errorf("version %q: %q, want %q", in, got, want)
		}
	}
}

// A manifest file's pod is presented as the kubelet's mirror pod:
// <name>-<device>, the config annotations, owned by its node.
func TestMirrorPodNames(t *testing.T) {
	f := twoDevices(t, Config{})
	if got := f.podNames("/api/v1/pods"); got != "default/db-dev1 default/web-dev1 default/web-dev2" {
		t.Fatalf("pods: %s", got)
	}
	var p v1.Pod
	f.getJSON("/api/v1/namespaces/default/pods/web-dev2", "", &p)
	if p.Spec.NodeName != "dev2" || p.Annotations[annotationConfigSource] != "file" || p.Annotations[annotationConfigMirror] == "" {
		t.Errorf("mirror pod: node %q annotations %v", p.Spec.NodeName, p.Annotations)
	}
	if len(p.OwnerReferences) != 1 || p.OwnerReferences[0].Kind != "Node" || p.OwnerReferences[0].Name != "dev2" {
		t.Errorf("owner %+v", p.OwnerReferences)
	}
	code, b := f.get("/api/v1/namespaces/default/pods/web", "")
	var st metav1.Status
	json.Unmarshal(b, &st)
	if code != http.StatusNotFound || st.Reason != metav1.StatusReasonNotFound || st.Message != `pods "web" not found` {
		t.Errorf("unknown pod: %d %s", code, b)
	}
}

func TestTableColumns(t *testing.T) {
	f := twoDevices(t, Config{})
	var tbl metav1.Table
	f.getJSON("/api/v1/pods", tableAccept, &tbl)
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, fmt.Sprintf("%s/%d", c.Name, c.Priority))
	}
	if got := strings.Join(cols, ","); got != "Name/0,Ready/0,Status/0,Restarts/0,Age/0,IP/1,Node/1,Nominated Node/1,Readiness Gates/1" {
		t.Errorf("pod columns %s", got)
	}
	if len(tbl.Rows) != 3 {
		t.Fatalf("%d rows", len(tbl.Rows))
	}
	if got := fmt.Sprint(tbl.Rows[1].Cells); got != "[web-dev1 1/1 Running 2 10m 10.88.0.5 dev1 <none> <none>]" {
		t.Errorf("web-dev1 row %s", got)
	}
	var meta metav1.PartialObjectMetadata
	json.Unmarshal(tbl.Rows[1].Object.Raw, &meta)
	if meta.Kind != "PartialObjectMetadata" || meta.Namespace != "default" || meta.Name != "web-dev1" {
		t.Errorf("row object %s", tbl.Rows[1].Object.Raw)
	}
	f.getJSON("/api/v1/nodes", tableAccept, &tbl)
	// The age counts from when the fleet first knew the device, on the
	// wall clock (the fleet database keeps no other); the fake clock's
	// answer is only not <unknown>.
	cells := tbl.Rows[0].Cells
	if age := fmt.Sprint(cells[3]); age == "<unknown>" || age == "" {
		t.Errorf("dev1's age %q: want the time since the fleet first knew it", age)
	}
	cells[3] = "AGE"
	if got := fmt.Sprint(cells); got != "[dev1 Ready gateway AGE v1.37.2-podvisor 192.0.2.10 <none> Debian GNU/Linux 12 (bookworm) 6.1.0-28-amd64 podvisor://1.0]" {
		t.Errorf("dev1 row %s", got)
	}
	tbl = metav1.Table{}
	f.getJSON("/api/v1/namespaces/default/events?includeObject=None", tableAccept, &tbl)
	if len(tbl.Rows) != 1 || fmt.Sprint(tbl.Rows[0].Cells[:7]) != "[60s Warning BackOff pod/web-dev1  kubelet, dev1 Back-off restarting failed container main]" || len(tbl.Rows[0].Object.Raw) != 0 {
		t.Errorf("event rows %+v", tbl.Rows)
	}
	// A device gone silent: NotReady, its pods Unknown.
	f.advance(2 * fleetdb90)
	f.api.ref.locked(f.api.ref.resyncNodes)
	f.getJSON("/api/v1/nodes/dev1", tableAccept, &tbl)
	if got := tbl.Rows[0].Cells[1]; got != "NotReady" {
		t.Errorf("silent device: %v", got)
	}
	f.getJSON("/api/v1/namespaces/default/pods/web-dev1", tableAccept, &tbl)
	if got := tbl.Rows[0].Cells[2]; got != "NodeLost" && got != "Unknown" {
		t.Errorf("silent device's pod: %v", got)
	}
}

const fleetdb90 = 90 * time.Second

func TestSelectors(t *testing.T) {
	f := twoDevices(t, Config{})
	// kubectl describe node's pod query.
	if got := f.podNames("/api/v1/pods?fieldSelector=spec.nodeName%3Ddev1%2Cstatus.phase%21%3DFailed%2Cstatus.phase%21%3DSucceeded"); got != "default/db-dev1 default/web-dev1" {
		t.Errorf("pods on dev1: %s", got)
	}
	if got := f.podNames("/api/v1/namespaces/default/pods?labelSelector=app%3Dweb"); got != "default/web-dev1 default/web-dev2" {
		t.Errorf("app=web: %s", got)
	}
	if got := f.podNames("/api/v1/namespaces/other/pods"); got != "" {
		t.Errorf("namespace other: %s", got)
	}
	code, b := f.get("/api/v1/pods?fieldSelector=spec.hostname%3Dx", "")
	if code != http.StatusBadRequest || !strings.Contains(string(b), "field label not supported: spec.hostname") {
		t.Errorf("unsupported field: %d %s", code, b)
	}
	// kubectl describe pod's event query: a mirror pod's events are its
	// static pod's, asked for by the UID in kubernetes.io/config.mirror.
	var p v1.Pod
	f.getJSON("/api/v1/namespaces/default/pods/web-dev1", "", &p)
	mirror := p.Annotations["kubernetes.io/config.mirror"]
	if mirror != "hash-file-web" {
		t.Errorf("config.mirror of web-dev1: %q", mirror)
	}
	var evs v1.EventList
	f.getJSON("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dweb-dev1%2CinvolvedObject.namespace%3Ddefault%2CinvolvedObject.uid%3D"+mirror+"&limit=500", "", &evs)
	if len(evs.Items) != 1 || evs.Items[0].Reason != "BackOff" || evs.Items[0].Source.Host != "dev1" {
		t.Errorf("events of web-dev1: %+v", evs.Items)
	}
	var nss v1.NamespaceList
	f.getJSON("/api/v1/namespaces", "", &nss)
	if len(nss.Items) != 2 || nss.Items[0].Name != "default" || nss.Items[1].Name != "kube-node-lease" || nss.Items[0].Status.Phase != v1.NamespaceActive {
		t.Errorf("namespaces %+v", nss.Items)
	}
}

func TestLimitContinue(t *testing.T) {
	f := twoDevices(t, Config{})
	var page v1.PodList
	f.getJSON("/api/v1/pods?limit=2", "", &page)
	if len(page.Items) != 2 || page.Continue == "" || page.RemainingItemCount == nil || *page.RemainingItemCount != 1 {
		t.Fatalf("first page: %d items, continue %q", len(page.Items), page.Continue)
	}
	rv, token := page.ResourceVersion, page.Continue
	page = v1.PodList{}
	f.getJSON("/api/v1/pods?limit=2&continue="+token, "", &page)
	if len(page.Items) != 1 || page.Items[0].Name != "web-dev2" || page.Continue != "" || page.ResourceVersion != rv {
		t.Errorf("second page: %d items, continue %q, rv %s (first %s)", len(page.Items), page.Continue, page.ResourceVersion, rv)
	}
	if code, _ := f.get("/api/v1/pods?limit=2&continue=garbage", ""); code != http.StatusBadRequest {
		t.Errorf("bad continue: %d", code)
	}
}

func TestMethodsRefused(t *testing.T) {
	f := twoDevices(t, Config{})
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		req, _ := http.NewRequest(m, f.srv.URL+"/api/v1/namespaces/default/pods/web-dev1", strings.NewReader("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var st metav1.Status
		json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || st.Reason != metav1.StatusReasonMethodNotAllowed {
			t.Errorf("%s: %d %+v", m, resp.StatusCode, st)
		}
	}
}

// watchLines opens a watch and returns its decoded events as they come.
func watchLines(t *testing.T, f *fixture, path, accept string) (<-chan watchEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path, nil)
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan watchEvent, 100)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var e watchEvent
			if json.Unmarshal(sc.Bytes(), &e) == nil {
				out <- e
			}
		}
	}()
	return out, cancel
}

// next waits (at most 10 s) for a watch's next event.
func next(t *testing.T, ch <-chan watchEvent, what string) watchEvent {
	t.Helper()
	select {
	case e, ok := <-ch:
		if !ok {
			t.Fatalf("watch ended waiting for %s", what)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
	}
	return watchEvent{}
}

func TestWatchFromResourceVersion(t *testing.T) {
	f := twoDevices(t, Config{})
	var list v1.PodList
	f.getJSON("/api/v1/pods", "", &list)
	ch, stop := watchLines(t, f, "/api/v1/namespaces/default/pods?watch=1&resourceVersion="+list.ResourceVersion, "")
	defer stop()
	f.report("dev2", podItem(filePod("web", 1)), podItem(filePod("cache", 0)))
	seen := map[string]bool{}
	for len(seen) < 2 {
		e := next(t, ch, "web-dev2 MODIFIED and cache-dev2 ADDED")
		var p v1.Pod
		json.Unmarshal(e.Object, &p)
		seen[e.Type+" "+p.Name] = true
	}
	if !seen["MODIFIED web-dev2"] || !seen["ADDED cache-dev2"] {
		t.Errorf("events %v", seen)
	}
	f.report("dev2", goneItem("default/cache"))
	e := next(t, ch, "cache-dev2 DELETED")
	var p v1.Pod
	json.Unmarshal(e.Object, &p)
	if e.Type != "DELETED" || p.Name != "cache-dev2" {
		t.Errorf("after removal: %s %s", e.Type, p.Name)
	}
	// Table watch (kubectl get -w): each event a one-row Table.
	tch, tstop := watchLines(t, f, "/api/v1/pods?watch=1&resourceVersion="+list.ResourceVersion+"&fieldSelector=spec.nodeName%3Ddev2", tableAccept)
	defer tstop()
	e = next(t, tch, "a table event")
	var tbl metav1.Table
	json.Unmarshal(e.Object, &tbl)
	if tbl.Kind != "Table" || len(tbl.Rows) != 1 || !strings.HasSuffix(fmt.Sprint(tbl.Rows[0].Cells[0]), "-dev2") {
		t.Errorf("table event %s %s", e.Type, e.Object)
	}
}

func TestWatchTooOldIsGone(t *testing.T) {
	f := twoDevices(t, Config{RingSize: 4})
	var list v1.PodList
	f.getJSON("/api/v1/pods", "", &list)
	for i := 1; i <= 6; i++ {
		f.report("dev2", podItem(filePod("web", int32(i))))
		f.eventually(fmt.Sprintf("change %d of web-dev2", i), func() bool {
			var p v1.Pod
			f.getJSON("/api/v1/namespaces/default/pods/web-dev2", "", &p)
			return p.Status.ContainerStatuses[0].RestartCount == int32(i)
		})
	}
	ch, stop := watchLines(t, f, "/api/v1/pods?watch=1&resourceVersion="+list.ResourceVersion, "")
	defer stop()
	e := next(t, ch, "the 410 event")
	var st metav1.Status
	json.Unmarshal(e.Object, &st)
	if e.Type != "ERROR" || st.Code != http.StatusGone || st.Reason != metav1.StatusReasonExpired || !strings.HasPrefix(st.Message, "too old resource version: ") {
		t.Errorf("too old: %s %+v", e.Type, st)
	}
}

func TestWatchBookmarks(t *testing.T) {
	f := twoDevices(t, Config{BookmarkInterval: 20 * time.Millisecond})
	ch, stop := watchLines(t, f, "/api/v1/nodes?watch=1&allowWatchBookmarks=true", "")
	defer stop()
	names := map[string]bool{}
	for {
		e := next(t, ch, "the nodes, then a bookmark")
		if e.Type == "BOOKMARK" {
			var m metav1.PartialObjectMetadata
			json.Unmarshal(e.Object, &m)
			if m.ResourceVersion == "" || m.Kind != "Node" {
				t.Errorf("bookmark %s", e.Object)
			}
			break
		}
		var n v1.Node
		json.Unmarshal(e.Object, &n)
		names[e.Type+" "+n.Name] = true
	}
	if !names["ADDED dev1"] || !names["ADDED dev2"] {
		t.Errorf("initial events %v", names)
	}
}

func TestAccessReview(t *testing.T) {
	f := newFixture(t, Config{})
	ask := func(verb, group, res string) bool {
		body, _ := json.Marshal(authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verb, Group: group, Resource: res}}})
		resp, err := http.Post(f.srv.URL+"/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out authorizationv1.SelfSubjectAccessReview
		json.NewDecoder(resp.Body).Decode(&out)
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("review: %d", resp.StatusCode)
		}
		return out.Status.Allowed
	}
	for _, c := range []struct {
		verb, group, res string
		want             bool
	}{{"list", "", "pods", true}, {"watch", "apps", "deployments", true}, {"delete", "", "pods", false},
		{"get", "", "secrets", false}, {"get", "", "configmaps", false}, {"create", "apps", "deployments", false}} {
		if got := ask(c.verb, c.group, c.res); got != c.want {
			t.Errorf("%s %s/%s: allowed %v", c.verb, c.group, c.res, got)
		}
	}
}

// fakeLogs answers a pod's log (the remotelogs part implements it).
type fakeLogs struct{ device, namespace, pod, container string }

func (l *fakeLogs) PodLogs(ctx context.Context, device, namespace, pod string, opts *v1.PodLogOptions, w io.Writer) error {
	l.device, l.namespace, l.pod, l.container = device, namespace, pod, opts.Container
	if device == "dev2" {
		return apierrors.NewServiceUnavailable(`device "dev2" is offline`)
	}
	_, err := fmt.Fprintf(w, "hello from %s/%s on %s\n", namespace, pod, device)
	return err
}

func TestPodLogs(t *testing.T) {
	logs := &fakeLogs{}
	f := twoDevices(t, Config{Logs: logs})
	code, b := f.get("/api/v1/namespaces/default/pods/web-dev1/log?tailLines=10", "")
	if code != http.StatusOK || string(b) != "hello from default/web on dev1\n" || logs.container != "main" {
		t.Errorf("log: %d %q %+v", code, b, logs)
	}
	code, b = f.get("/api/v1/namespaces/default/pods/web-dev2/log", "")
	if code != http.StatusServiceUnavailable || !strings.Contains(string(b), `device \"dev2\" is offline`) {
		t.Errorf("offline: %d %s", code, b)
	}
	code, b = f.get("/api/v1/namespaces/default/pods/web-dev1/log?container=side", "")
	if code != http.StatusBadRequest || !strings.Contains(string(b), "container side is not valid for pod web-dev1") {
		t.Errorf("bad container: %d %s", code, b)
	}
	if code, _ = f.get("/api/v1/namespaces/default/pods/nope/log", ""); code != http.StatusNotFound {
		t.Errorf("no pod: %d", code)
	}
}

// A hub pod no device runs yet is listed Pending, with the scheduler's
// events when described.
func TestHubPodAndSchedulerEvents(t *testing.T) {
	f := twoDevices(t, Config{})
	pod := &v1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{Name: "api-x", Namespace: "default", UID: "uid-api-x", CreationTimestamp: metav1.NewTime(t0)},
		Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "api", Image: "busybox"}}}}
	raw, _ := json.Marshal(pod)
	bound := pod.DeepCopy()
	bound.Name, bound.UID, bound.Spec.NodeName = "api-y", "uid-api-y", "dev1"
	rawBound, _ := json.Marshal(bound)
	store := workloaddb.New(f.fleet.SQL())
	err := store.StorePods(workloaddb.PodWrites{Put: []workloaddb.PodWrite{{Key: types.NamespacedName{Namespace: "default", Name: "api-x"}, Raw: raw},
		{Key: types.NamespacedName{Namespace: "default", Name: "api-y"}, Device: "dev1", Raw: rawBound}},
		Events: []workloaddb.SchedEvent{{Kind: "Pod", Namespace: "default", Name: "api-x", Type: "Warning", Reason: "FailedScheduling",
			Message: "0/2 nodes are available: 2 Insufficient cpu."}}}, t0)
	if err != nil {
		t.Fatal(err)
	}
	f.fleet.Changes().Publish("", fleetwatch.Workloads) // as the scheduler does after its pass
	f.eventually("the hub pod listed", func() bool { return strings.Contains(f.podNames("/api/v1/pods"), "default/api-x") })
	// Bound to dev1, which does not report it yet: on dev1, its name kept.
	if got := f.podNames("/api/v1/pods?fieldSelector=spec.nodeName%3Ddev1"); got != "default/api-y default/db-dev1 default/web-dev1" {
		t.Errorf("pods on dev1: %s", got)
	}
	var tbl metav1.Table
	f.getJSON("/api/v1/namespaces/default/pods/api-x", tableAccept, &tbl)
	if got := fmt.Sprint(tbl.Rows[0].Cells); got != "[api-x 0/1 Pending 0 <unknown> <none> <none> <none> <none>]" && !strings.Contains(got, "Pending") {
		t.Errorf("hub pod row %s", got)
	}
	var evs v1.EventList
	f.getJSON("/api/v1/namespaces/default/events?fieldSelector=involvedObject.name%3Dapi-x%2CinvolvedObject.namespace%3Ddefault%2CinvolvedObject.kind%3DPod%2CinvolvedObject.uid%3Duid-api-x", "", &evs)
	if len(evs.Items) != 1 || evs.Items[0].Reason != "FailedScheduling" || evs.Items[0].Source.Component != "podhub" {
		t.Errorf("scheduler events %+v", evs.Items)
	}
	code, b := f.get("/api/v1/namespaces/default/pods/api-x/log", "")
	if code != http.StatusBadRequest || !strings.Contains(string(b), "pod api-x does not have a host assigned") {
		t.Errorf("log of an unbound pod: %d %s", code, b)
	}
}

// A watch list (client-go's reflector): every object ADDED, then the
// bookmark that ends the initial events.
func TestWatchList(t *testing.T) {
	f := twoDevices(t, Config{})
	ch, stop := watchLines(t, f, "/api/v1/pods?watch=1&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true", "")
	defer stop()
	var got []string
	for {
		e := next(t, ch, "the initial events and their bookmark")
		var m metav1.PartialObjectMetadata
		json.Unmarshal(e.Object, &m)
		if e.Type == "BOOKMARK" {
			if m.Annotations[metav1.InitialEventsAnnotationKey] != "true" || m.ResourceVersion == "" {
				t.Errorf("bookmark %s", e.Object)
			}
			break
		}
		got = append(got, e.Type+" "+m.Name)
	}
	if fmt.Sprint(got) != "[ADDED db-dev1 ADDED web-dev1 ADDED web-dev2]" {
		t.Errorf("initial events %v", got)
	}
	if code, _ := f.get("/api/v1/pods?watch=1&sendInitialEvents=true", ""); code != http.StatusBadRequest {
		t.Errorf("watch list without bookmarks: %d", code)
	}
}

// followLogs writes one line, then streams until its reader goes.
type followLogs struct{ ended chan error }

func (l *followLogs) PodLogs(ctx context.Context, device, namespace, pod string, opts *v1.PodLogOptions, w io.Writer) error {
	if !opts.Follow {
		return apierrors.NewBadRequest("expected follow")
	}
	fmt.Fprintf(w, "first line of %s\n", pod)
	<-ctx.Done()
	l.ended <- ctx.Err()
	return ctx.Err()
}

// A followed log's lines reach the client as they are written, and the
// stream's context ends when the client goes.
func TestPodLogsFollow(t *testing.T) {
	logs := &followLogs{ended: make(chan error, 1)}
	f := twoDevices(t, Config{Logs: logs})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/api/v1/namespaces/default/pods/web-dev1/log?follow=true", nil)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	lines := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(resp.Body).ReadString('\n')
		lines <- l
	}()
	select {
	case l := <-lines:
		if l != "first line of web\n" {
			t.Errorf("first line %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for the first line of a followed log")
	}
	cancel()
	select {
	case <-logs.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("waited 10s for the log stream to end after its reader went")
	}
}

// The metadata client's lists: PartialObjectMetadataList.
func TestMetadataOnly(t *testing.T) {
	f := twoDevices(t, Config{})
	var list metav1.PartialObjectMetadataList
	f.getJSON("/api/v1/pods", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json", &list)
	if list.Kind != "PartialObjectMetadataList" || len(list.Items) != 3 || list.Items[0].Kind != "PartialObjectMetadata" || list.Items[1].Name != "web-dev1" {
		t.Errorf("metadata list %+v", list)
	}
	var one metav1.PartialObjectMetadata
	f.getJSON("/api/v1/nodes/dev1", "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1", &one)
	if one.Kind != "PartialObjectMetadata" || one.Name != "dev1" || one.Labels["zone"] != "a" {
		t.Errorf("metadata of dev1 %+v", one)
	}
}

// A node's lease is made with its node: k9s's leases view shows its AGE.
func TestLeaseAge(t *testing.T) {
	f := twoDevices(t, Config{})
	var node v1.Node
	var lease coordinationv1.Lease
	f.getJSON("/api/v1/nodes/dev1", "", &node)
	f.getJSON("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/dev1", "", &lease)
	if node.CreationTimestamp.IsZero() || !lease.CreationTimestamp.Equal(&node.CreationTimestamp) ||
		lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "dev1" {
		t.Errorf("lease %+v of node made %v", lease.ObjectMeta, node.CreationTimestamp)
	}
}
