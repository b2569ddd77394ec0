package hubmetrics

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/hub/updates"
	"github.com/podvisor/podvisor/sync/protocol"
)

// testNow is the fixtures' clock: the hub's, fixed.
var testNow = time.Unix(1800000000, 0)

const testTimeout = 90 * time.Second

// fleet is a real fleet database in a temp dir, written through the
// hub's own write paths.
type fleet struct {
	t   testing.TB
	db  *fleetdb.Fleet
	wl  *workloaddb.Store
	now time.Time
}

func newFleet(t testing.TB) *fleet {
	t.Helper()
	db, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &fleet{t: t, db: db, wl: workloaddb.New(db.SQL()), now: testNow}
}

func (f *fleet) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

// ready adds a device online that sent a heartbeat ago before now.
func (f *fleet) online(id string, ago time.Duration, version string, snap *protocol.MetricsSnapshot) {
	f.t.Helper()
	f.must(f.db.AddDevice(id))
	_, err := f.db.SavePresence(id, &protocol.Presence{Device: id, Online: true}, f.now.Add(-ago))
	f.must(err)
	_, _, err = f.db.SaveHeartbeat(&protocol.Heartbeat{Device: id, Version: version, Metrics: snap}, f.now.Add(-ago))
	f.must(err)
}

// offline adds a device the hub knows and has no presence of.
func (f *fleet) offline(id string) { f.t.Helper(); f.must(f.db.AddDevice(id)) }

// report stores a device's mirror pods with these phases (by name);
// those named in scheduled are hub pods the scheduler placed there (as
// their annotation says).
func (f *fleet) report(device string, phases map[string]v1.PodPhase, scheduled ...string) {
	f.t.Helper()
	b := &protocol.StatusBatch{Device: device, Epoch: "e1"}
	for name, phase := range phases {
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Status: v1.PodStatus{Phase: phase}}
		if slices.Contains(scheduled, name) {
			pod.Annotations = map[string]string{fleetdb.AnnotationScheduled: "true"}
		}
		b.Items = append(b.Items, protocol.StatusItem{Seq: int64(len(b.Items) + 1), Key: "default/" + name, Pod: pod})
	}
	r, err := f.db.StoreStatus(b, f.now)
	f.must(err)
	if r.Applied != len(phases) {
		f.t.Fatalf("device %s: %d of %d statuses stored", device, r.Applied, len(phases))
	}
}

func (f *fleet) metrics(c *Counters) *Metrics {
	return New(Config{Fleet: f.db, Workloads: f.wl, Timeout: testTimeout, Now: func() time.Time { return f.now }, Counters: c, Version: "v1.2.3"})
}

// scrape parses an exposition with Prometheus' own parser.
func scrape(t testing.TB, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	body, err := m.Exposition(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return parse(t, body)
}

func parse(t testing.TB, body []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus' parser refused the exposition: %v\n%s", err, body)
	}
	return fams
}

// series maps each sample of a family to its value, keyed by its labels
// as name=value pairs joined by commas in the table's order.
func series(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	fam := fams[name]
	if fam == nil {
		return out
	}
	for _, m := range fam.Metric {
		var key bytes.Buffer
		for i, l := range m.Label {
			if i > 0 {
				key.WriteByte(',')
			}
			fmt.Fprintf(&key, "%s=%s", l.GetName(), l.GetValue())
		}
		switch {
		case m.Gauge != nil:
			out[key.String()] = m.Gauge.GetValue()
		case m.Counter != nil:
			out[key.String()] = m.Counter.GetValue()
		case m.Untyped != nil:
			out[key.String()] = m.Untyped.GetValue()
		}
	}
	return out
}

// workloads applies a Deployment and a DaemonSet, and stores their
// statuses as their controllers would.
func (f *fleet) workloads() {
	f.t.Helper()
	objs, err := kinds.Decode("workloads.yaml", []byte(`apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {containers: [{name: web, image: web:1}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: agent:1}]}
`))
	f.must(err)
	f.must(f.wl.ApplyObjects(objs, f.now))
	f.must(f.wl.StorePods(workloaddb.PodWrites{Statuses: []workloaddb.StatusWrite{
		{Kind: workloaddb.KindDeployment, Namespace: "shop", Name: "web", Raw: json.RawMessage(`{"replicas":3,"updatedReplicas":2,"readyReplicas":1,"availableReplicas":1}`)},
		{Kind: workloaddb.KindDaemonSet, Namespace: "kube-system", Name: "agent", Raw: json.RawMessage(`{"desiredNumberScheduled":5,"currentNumberScheduled":5,"updatedNumberScheduled":4,"numberReady":3,"numberAvailable":2,"numberMisscheduled":0}`)},
	}}, f.now))
}

// hubPod stores a hub pod bound to device ("" unbound).
func (f *fleet) hubPod(name, device string) {
	f.t.Helper()
	raw, _ := json.Marshal(&v1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: v1.PodSpec{NodeName: device}})
	f.must(f.wl.StorePods(workloaddb.PodWrites{Put: []workloaddb.PodWrite{{Key: types.NamespacedName{Namespace: "default", Name: name}, Device: device, Raw: raw}}}, f.now))
}

// update stores an update over targets with its devices' states; active
// says whether it is unfinished.
func (f *fleet) update(name string, active bool, states map[string]string) {
	f.t.Helper()
	st := updates.Status{Phase: updates.Progressing}
	var targets []string
	for dev, s := range states {
		st.Devices = append(st.Devices, updates.DeviceStatus{ID: dev, State: s})
		targets = append(targets, dev)
	}
	raw, _ := json.Marshal(st)
	f.must(f.db.AddUpdate(fleetdb.StoredUpdate{Name: name, Spec: json.RawMessage(`{}`), Status: raw, Created: f.now}, "podvisor", "2.0.0", targets))
	if !active {
		st.Phase = updates.Complete
		raw, _ = json.Marshal(st)
		f.must(f.db.SetUpdateStatus(name, raw, false))
	}
}
