package hubmetrics

import (
	"compress/gzip"
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	dto "github.com/prometheus/client_model/go"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/sync/hub/devicelink"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// The counters are what the device link is told of.
var _ devicelink.Observer = (*Counters)(nil)

func assertSeries(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]float64) {
	t.Helper()
	if got := series(fams, name); !maps.Equal(got, want) {
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

// Two ready devices and one offline: the device gauges say so, every
// state written (a zero too, so a dashboard's series never vanish), and
// a fleet with no pods has every phase at zero.
func TestTwoReadyOneOffline(t *testing.T) {
	f := newFleet(t)
	f.online("a", 10*time.Second, "v1", nil)
	f.online("b", 20*time.Second, "v1", nil)
	f.offline("c")
	fams := scrape(t, f.metrics(nil))
	assertSeries(t, fams, "podhub_devices", map[string]float64{
		"state=ready": 2, "state=not_ready": 0, "state=offline": 1, "state=fenced": 0})
	assertSeries(t, fams, "podhub_pods", map[string]float64{
		"phase=Pending": 0, "phase=Running": 0, "phase=Succeeded": 0, "phase=Failed": 0, "phase=Unknown": 0})
	assertSeries(t, fams, "podhub_device_ready", map[string]float64{"device=a": 1, "device=b": 1, "device=c": 0})
	assertSeries(t, fams, "podhub_desired_pending_ack", map[string]float64{"": 0})
	// No device sent a snapshot: no snapshot series at all.
	for _, sf := range snapshotFamilies {
		if fam := fams[sf.Name]; fam != nil {
			t.Errorf("%s has %d samples without any snapshot", sf.Name, len(fam.Metric))
		}
	}
}

// fullFleet is a fleet with something in every family: devices in each
// state, mirror and hub pods, a desired document not yet acknowledged,
// workloads with statuses, an update under way and one finished, and
// two snapshots (one full, one without the optional fields).
func fullFleet(t *testing.T) (*fleet, *Counters) {
	f := newFleet(t)
	full := &protocol.MetricsSnapshot{Since: 1799990000, RunningPods: 3, RunningContainers: 4, Evictions: 2, Preemptions: 1,
		StartedContainersErrors: 5, ContainerRestarts: 7, ProbeFailures: 11, PodsCPUSeconds: 12.5, PodsMemoryWorkingSet: 1 << 20,
		NodeMemoryWorkingSet: 3 << 20, NodeMemoryAvailable: 5 << 20, NodeFsAvailable: 7 << 20,
		Pressure: &protocol.PressureSnapshot{CPU: 50, Memory: 25, IO: 10}, OutboxDepth: 6, OutboxOldestSecs: 1.5}
	f.online("a", 10*time.Second, "v1", full)
	// An untrusted version string: escaped, never breaking the format.
	f.online("b", 20*time.Second, "1.0\"\n{x}", &protocol.MetricsSnapshot{Since: 1799990001, RunningPods: 1})
	f.offline("c")
	f.online("d", 5*time.Second, "v1", nil)
	f.must(f.db.SetFenced("d", f.now))
	// Silent past the timeout: its snapshot is not re-exported.
	f.online("e", 5*time.Minute, "v0", &protocol.MetricsSnapshot{RunningPods: 9})
	f.report("a", map[string]v1.PodPhase{"web": v1.PodRunning, "crash": v1.PodRunning, "job": v1.PodSucceeded}, "web")
	f.report("b", map[string]v1.PodPhase{"wait": v1.PodPending, "odd": "Exploded"})
	f.hubPod("web", "a")    // reported by a: counted once, as its mirror
	f.hubPod("queued", "")  // unbound: Pending
	f.hubPod("placed", "c") // bound to an offline device, not reported: Pending
	f.must(f.db.SaveDesired(fleetdb.DesiredDoc{Device: "a", Generation: 1, Document: []byte("{}")}))
	f.workloads()
	f.update("rollout-2", true, map[string]string{"a": "Done", "b": protocol.UpdateDownloading, "c": "Offline", "e": "Offline"})
	f.update("rollout-1", false, map[string]string{"a": "Done"})
	c := NewCounters()
	c.StatusItemsStored(3)
	c.StatusItemsStored(0)
	c.HeartbeatStored()
	c.HeartbeatStored()
	c.MessageRefused(protocol.KindStatus)
	c.MessageRefused(protocol.KindStatus)
	c.MessageRefused(protocol.KindHeartbeat)
	c.MessageNotOwned(protocol.KindStatus)
	return f, c
}

func TestKnownFleet(t *testing.T) {
	f, c := fullFleet(t)
	fams := scrape(t, f.metrics(c))
	assertSeries(t, fams, "podhub_devices", map[string]float64{
		"state=ready": 2, "state=not_ready": 1, "state=offline": 1, "state=fenced": 1})
	assertSeries(t, fams, "podhub_pods", map[string]float64{
		"phase=Pending": 3, "phase=Running": 2, "phase=Succeeded": 1, "phase=Failed": 0, "phase=Unknown": 1})
	assertSeries(t, fams, "podhub_desired_pending_ack", map[string]float64{"": 1})
	assertSeries(t, fams, "podhub_status_items_total", map[string]float64{"": 3})
	assertSeries(t, fams, "podhub_heartbeats_total", map[string]float64{"": 2})
	assertSeries(t, fams, "podhub_refused_messages_total", map[string]float64{"kind=status": 2, "kind=heartbeat": 1})
	assertSeries(t, fams, "podhub_messages_not_owned_total", map[string]float64{"kind=status": 1})
	assertSeries(t, fams, "podhub_workload_replicas", map[string]float64{
		"kind=Deployment,namespace=shop,name=web,state=desired":           3,
		"kind=Deployment,namespace=shop,name=web,state=updated":           2,
		"kind=Deployment,namespace=shop,name=web,state=ready":             1,
		"kind=Deployment,namespace=shop,name=web,state=available":         1,
		"kind=DaemonSet,namespace=kube-system,name=agent,state=desired":   5,
		"kind=DaemonSet,namespace=kube-system,name=agent,state=updated":   4,
		"kind=DaemonSet,namespace=kube-system,name=agent,state=ready":     3,
		"kind=DaemonSet,namespace=kube-system,name=agent,state=available": 2,
	})
	// Only the unfinished update.
	assertSeries(t, fams, "podhub_update_devices", map[string]float64{
		"update=rollout-2,state=Done": 1, "update=rollout-2,state=Downloading": 1, "update=rollout-2,state=Offline": 2})
	info := series(fams, "podhub_build_info")
	if len(info) != 1 || !strings.HasPrefix(slices.Collect(maps.Keys(info))[0], "version=v1.2.3,goversion=go") {
		t.Errorf("podhub_build_info %v", info)
	}
	assertSeries(t, fams, "podhub_device_info", map[string]float64{
		"device=a,version=v1": 1, "device=b,version=1.0\"\n{x}": 1, "device=c,version=": 1, "device=d,version=v1": 1, "device=e,version=v0": 1})
	assertSeries(t, fams, "podhub_device_ready", map[string]float64{"device=a": 1, "device=b": 1, "device=c": 0, "device=d": 1, "device=e": 0})
	// a and b reported their pods now; c was never heard from.
	assertSeries(t, fams, "podhub_device_last_seen_timestamp_seconds", map[string]float64{
		"device=a": 1800000000, "device=b": 1800000000, "device=d": 1799999995, "device=e": 1799999700})

	// The snapshots: one series per field and Ready device; b's omitted
	// fields and its missing pressure give none, and e's, not Ready,
	// none at all.
	assertSeries(t, fams, "podhub_device_start_time_seconds", map[string]float64{"device=a": 1799990000, "device=b": 1799990001})
	assertSeries(t, fams, "podhub_device_running_pods", map[string]float64{"device=a": 3, "device=b": 1})
	assertSeries(t, fams, "podhub_device_running_containers", map[string]float64{"device=a": 4, "device=b": 0})
	assertSeries(t, fams, "podhub_device_evictions_total", map[string]float64{"device=a": 2, "device=b": 0})
	assertSeries(t, fams, "podhub_device_preemptions_total", map[string]float64{"device=a": 1, "device=b": 0})
	assertSeries(t, fams, "podhub_device_started_containers_errors_total", map[string]float64{"device=a": 5, "device=b": 0})
	assertSeries(t, fams, "podhub_device_container_restarts_total", map[string]float64{"device=a": 7, "device=b": 0})
	assertSeries(t, fams, "podhub_device_probe_failures_total", map[string]float64{"device=a": 11, "device=b": 0})
	assertSeries(t, fams, "podhub_device_pods_cpu_usage_seconds_total", map[string]float64{"device=a": 12.5, "device=b": 0})
	assertSeries(t, fams, "podhub_device_pods_memory_working_set_bytes", map[string]float64{"device=a": 1 << 20, "device=b": 0})
	assertSeries(t, fams, "podhub_device_node_memory_working_set_bytes", map[string]float64{"device=a": 3 << 20})
	assertSeries(t, fams, "podhub_device_node_memory_available_bytes", map[string]float64{"device=a": 5 << 20})
	assertSeries(t, fams, "podhub_device_node_fs_available_bytes", map[string]float64{"device=a": 7 << 20})
	assertSeries(t, fams, "podhub_device_pressure_avg10_ratio", map[string]float64{
		"device=a,resource=cpu": 0.5, "device=a,resource=memory": 0.25, "device=a,resource=io": 0.1})
	assertSeries(t, fams, "podhub_device_outbox_items", map[string]float64{"device=a": 6, "device=b": 0})
	assertSeries(t, fams, "podhub_device_outbox_oldest_unacked_seconds", map[string]float64{"device=a": 1.5, "device=b": 0})
}

// The exposition is the table: every family of Families() is written
// with its type and exactly its labels, and nothing else is.
func TestExpositionIsTheTable(t *testing.T) {
	f, c := fullFleet(t)
	fams := scrape(t, f.metrics(c))
	table := Families()
	for _, fam := range table {
		got := fams[fam.Name]
		if got == nil {
			t.Errorf("%s: in the table, not written (the full fleet should give it a sample)", fam.Name)
			continue
		}
		if want := strings.ToUpper(string(fam.Type)); got.GetType().String() != want {
			t.Errorf("%s: written as %s, the table says %s", fam.Name, got.GetType(), want)
		}
		if got.GetHelp() != fam.Help {
			t.Errorf("%s: help %q, the table says %q", fam.Name, got.GetHelp(), fam.Help)
		}
		for _, m := range got.Metric {
			var names []string
			for _, l := range m.Label {
				names = append(names, l.GetName())
			}
			if !slices.Equal(sortedCopy(names), sortedCopy(fam.Labels)) {
				t.Errorf("%s: a sample with labels %v, the table says %v", fam.Name, names, fam.Labels)
			}
		}
		delete(fams, fam.Name)
	}
	for name := range fams {
		t.Errorf("%s: written, not in the table", name)
	}
	if len(table) != len(slices.CompactFunc(slices.SortedFunc(slices.Values(table), func(a, b Family) int { return strings.Compare(a.Name, b.Name) }),
		func(a, b Family) bool { return a.Name == b.Name })) {
		t.Errorf("a family is in the table twice")
	}
}

func sortedCopy(s []string) []string { return slices.Sorted(slices.Values(s)) }

// A device reporting a phase Kubernetes does not define is counted
// Unknown (done above); one the fleet is fenced shows fenced even while
// it is Ready.
func TestDeviceState(t *testing.T) {
	at := time.Unix(1, 0)
	for _, c := range []struct {
		d    fleetdb.Device
		want string
	}{
		{fleetdb.Device{Online: true, Ready: true}, StateReady},
		{fleetdb.Device{Online: true}, StateNotReady},
		{fleetdb.Device{Online: true, DuplicateID: true}, StateNotReady},
		{fleetdb.Device{}, StateOffline},
		{fleetdb.Device{Online: true, Ready: true, FencedAt: &at}, StateFenced},
		{fleetdb.Device{FencedAt: &at}, StateFenced},
	} {
		if got := deviceState(&c.d); got != c.want {
			t.Errorf("%+v: %s, want %s", c.d, got, c.want)
		}
	}
}

func TestServeHTTP(t *testing.T) {
	f, c := fullFleet(t)
	srv := httptest.NewServer(f.metrics(c))
	defer srv.Close()
	get := func(method, encoding string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/metrics", nil)
		if encoding != "" {
			req.Header.Set("Accept-Encoding", encoding)
		}
		resp, err := srv.Client().Transport.RoundTrip(req) // no transparent gunzip
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	plain := get("GET", "")
	body, _ := io.ReadAll(plain.Body)
	if plain.StatusCode != 200 || plain.Header.Get("Content-Type") != metrics.ContentType || plain.Header.Get("Content-Encoding") != "" {
		t.Fatalf("GET: %s, %q, encoding %q", plain.Status, plain.Header.Get("Content-Type"), plain.Header.Get("Content-Encoding"))
	}
	parse(t, body)

	zipped := get("GET", "gzip")
	if zipped.Header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("Accept-Encoding gzip answered with encoding %q", zipped.Header.Get("Content-Encoding"))
	}
	zr, err := gzip.NewReader(zipped.Body)
	if err != nil {
		t.Fatal(err)
	}
	unzipped, _ := io.ReadAll(zr)
	if got, want := len(parse(t, unzipped)), len(parse(t, body)); got != want {
		t.Fatalf("gzipped exposition has %d families, plain %d", got, want)
	}
	if r := get("GET", "gzip;q=0"); r.Header.Get("Content-Encoding") != "" {
		t.Errorf("gzip;q=0 answered gzipped")
	}
	if head := get("HEAD", ""); head.StatusCode != 200 {
		t.Errorf("HEAD: %s", head.Status)
	}
	if post := get("POST", ""); post.StatusCode != http.StatusMethodNotAllowed || post.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST: %s, Allow %q", post.Status, post.Header.Get("Allow"))
	}
}

// A fleet database that cannot be read answers 503 with what failed,
// never a partial exposition.
func TestUnreadableFleet(t *testing.T) {
	f := newFleet(t)
	m := f.metrics(nil)
	f.db.Close()
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), "reading the devices") {
		t.Fatalf("closed fleet: %d %q", rec.Code, rec.Body.String())
	}
}

// One scrape reads the fleet at a time; a request that gives up while
// waiting gets an error, not a read.
func TestOneScrapeAtATime(t *testing.T) {
	f := newFleet(t)
	m := f.metrics(nil)
	m.scrape <- struct{}{} // a scrape in progress
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := m.Exposition(ctx); err == nil || !strings.Contains(err.Error(), "scrape in progress") {
		t.Fatalf("with a scrape in progress and the request gone: %v", err)
	}
	<-m.scrape
	if _, err := m.Exposition(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// The refused kinds are bounded whatever the link reports.
func TestRefusedKindsBounded(t *testing.T) {
	c := NewCounters()
	for i := range 100 {
		c.MessageRefused(strings.Repeat("k", i+1))
	}
	kinds, counts := c.refusedByKind()
	if len(kinds) > maxRefusedKinds+1 || !slices.Contains(kinds, "other") {
		t.Fatalf("%d kinds kept (%v)", len(kinds), kinds)
	}
	var sum uint64
	for _, n := range counts {
		sum += n
	}
	if sum != 100 {
		t.Fatalf("counted %d refusals of 100", sum)
	}
}

// A device's version is cut to a bounded label, at a character's
// boundary (Prometheus refuses a label that is not UTF-8).
func TestReportedLabelBounded(t *testing.T) {
	long := strings.Repeat("é", 100) // 200 bytes
	got := bounded(long)
	if len(got) > maxReportedLabel+len("…") || !utf8.ValidString(got) || !strings.HasSuffix(got, "…") {
		t.Fatalf("bounded to %d bytes, valid UTF-8 %t: %q", len(got), utf8.ValidString(got), got)
	}
	if bounded("v1.2.3") != "v1.2.3" {
		t.Fatalf("a short version changed")
	}
	f := newFleet(t)
	f.online("a", time.Second, long, nil)
	fams := scrape(t, f.metrics(nil))
	if info := series(fams, "podhub_device_info"); info["device=a,version="+got] != 1 {
		t.Fatalf("podhub_device_info %v", info)
	}
}
