package kubeapi

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// events.k8s.io/v1 serves the same events as core v1, converted as the
// API server converts them: same name and UID, message as note,
// involvedObject as regarding, its own field labels.
func TestEventsInBothGroups(t *testing.T) {
	f := twoDevices(t, Config{})
	var core v1.EventList
	f.getJSON("/api/v1/events", "", &core)
	var ev eventsv1.EventList
	f.getJSON("/apis/events.k8s.io/v1/events", "", &ev)
	if ev.Kind != "EventList" || ev.APIVersion != "events.k8s.io/v1" {
		t.Errorf("list kind %q apiVersion %q", ev.Kind, ev.APIVersion)
	}
	if len(core.Items) == 0 || len(ev.Items) != len(core.Items) {
		t.Fatalf("%d events.k8s.io events for %d core events", len(ev.Items), len(core.Items))
	}
	c, e := core.Items[0], ev.Items[0]
	if e.Name != c.Name || e.UID != c.UID || e.Note != c.Message || e.Reason != c.Reason || e.Type != c.Type ||
		e.Regarding != c.InvolvedObject || e.DeprecatedCount != c.Count || e.DeprecatedSource != c.Source ||
		!e.DeprecatedLastTimestamp.Equal(&c.LastTimestamp) {
		t.Errorf("converted event\n%+v\nfrom\n%+v", e, c)
	}
	q := "/apis/events.k8s.io/v1/namespaces/default/events?fieldSelector=regarding.name%3D" + c.InvolvedObject.Name + "%2Ctype%3D" + c.Type
	var sel eventsv1.EventList
	f.getJSON(q, "", &sel)
	if len(sel.Items) != 1 || sel.Items[0].Name != c.Name {
		t.Errorf("regarding.name=%s: %d events", c.InvolvedObject.Name, len(sel.Items))
	}
	if code, b := f.get("/apis/events.k8s.io/v1/events?fieldSelector=involvedObject.name%3Dx", ""); code != http.StatusBadRequest ||
		!strings.Contains(string(b), "field label not supported: involvedObject.name") {
		t.Errorf("core field label in events.k8s.io: %d %s", code, b)
	}
	var a, b metav1.Table
	f.getJSON("/api/v1/events", tableAccept, &a)
	f.getJSON("/apis/events.k8s.io/v1/events", tableAccept, &b)
	if len(a.Rows) == 0 || fmt.Sprint(a.Rows[0].Cells) != fmt.Sprint(b.Rows[0].Cells) {
		t.Errorf("rows differ: core %v, events.k8s.io %v", a.Rows, b.Rows)
	}
	// A device forgotten takes its events from both groups.
	f.api.ref.locked(func() { f.api.ref.forget(c.Source.Host) })
	f.getJSON("/apis/events.k8s.io/v1/events", "", &ev)
	for _, x := range ev.Items {
		if x.DeprecatedSource.Host == c.Source.Host {
			t.Errorf("event %s of a forgotten device still served", x.Name)
		}
	}
}

// Services, ReplicaSets and the kinds a fleet has none of answer, empty, so that views listing them
// with the rest (k9s's workloads and pulses, kubectl get all) work.
func TestKindsAFleetHasNoneOf(t *testing.T) {
	f := twoDevices(t, Config{})
	for path, kind := range map[string]string{"/api/v1/services": "ServiceList", "/api/v1/namespaces/default/services": "ServiceList",
		"/apis/apps/v1/replicasets": "ReplicaSetList", "/apis/apps/v1/namespaces/default/replicasets": "ReplicaSetList",
		"/api/v1/persistentvolumes": "PersistentVolumeList", "/apis/batch/v1/jobs": "JobList",
		"/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers": "HorizontalPodAutoscalerList",
		"/apis/networking.k8s.io/v1/networkpolicies":                       "NetworkPolicyList", "/api/v1/serviceaccounts": "ServiceAccountList"} {
		var list struct {
			Kind     string
			Metadata metav1.ListMeta
			Items    []any
		}
		f.getJSON(path, "", &list)
		if list.Kind != kind || list.Items == nil || len(list.Items) != 0 || list.Metadata.ResourceVersion == "" {
			t.Errorf("%s: %+v", path, list)
		}
	}
	var tbl metav1.Table
	f.getJSON("/apis/apps/v1/replicasets", tableAccept, &tbl)
	var cols []string
	for _, c := range tbl.ColumnDefinitions {
		cols = append(cols, fmt.Sprintf("%s/%d", c.Name, c.Priority))
	}
	if got := strings.Join(cols, ","); got != "Name/0,Desired/0,Current/0,Ready/0,Age/0,Containers/1,Images/1,Selector/1" || len(tbl.Rows) != 0 {
		t.Errorf("replicaset table: %s, %d rows", got, len(tbl.Rows))
	}
	if code, _ := f.get("/api/v1/namespaces/default/services/web", ""); code != http.StatusNotFound {
		t.Errorf("a service: %d", code)
	}
	req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/api/v1/namespaces/default/services", strings.NewReader("{}"))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("creating a service: %d", resp.StatusCode)
	}
}
