package devmetrics

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/pod/vocab"
)

// parse reads an exposition with Prometheus' own text parser.
func parse(t *testing.T, data []byte) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("Prometheus' parser refused the exposition: %v\n%s", err, data)
	}
	return fams
}

func write(t *testing.T, f func(*metrics.Writer)) []byte {
	t.Helper()
	var w metrics.Writer
	f(&w)
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	return w.Bytes()
}

// sample is the value of the family's sample whose labels include
// these pairs; ok false when there is none.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
next:
	for _, m := range fams[name].GetMetric() {
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, l := range m.Label {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			if !found {
				continue next
			}
		}
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func pod(name string, phase v1.PodPhase, restarts int32, running bool) *v1.Pod {
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-" + name)}}
	p.Status.Phase = phase
	cs := v1.ContainerStatus{Name: "app", RestartCount: restarts}
	if running {
		cs.State.Running = &v1.ContainerStateRunning{}
	} else {
		cs.State.Waiting = &v1.ContainerStateWaiting{Reason: "ContainerCreating"}
	}
	p.Status.ContainerStatuses = []v1.ContainerStatus{cs}
	return p
}

// fakeStats is a cgroup reader over fixed values.
type fakeStats map[string]cgroups.Stats

func (f fakeStats) Stats(path string) (cgroups.Stats, error) {
	s, ok := f[path]
	if !ok {
		return s, errors.New("no such cgroup")
	}
	return s, nil
}

// fakeNode is a node with fixed usage and pressure.
type fakeNode struct{}

func (fakeNode) Usage() (NodeUsage, error) {
	return NodeUsage{CPUSeconds: 1234.5, MemoryWorkingSet: 100 << 20, MemoryAvailable: 200 << 20, FsAvailable: 1 << 30}, nil
}
func (fakeNode) Pressure() ([]PSI, error) {
	return []PSI{{Resource: "cpu", SomeAvg10: 12.5, SomeTotal: 3 * time.Second},
		{Resource: "memory", SomeAvg10: 1, SomeTotal: time.Second, FullTotal: time.Second / 2, HasFull: true}}, nil
}

// The recorder's view of pods over time: starts observed from first sight
// to running, restarts counted, probe series dropped with their pod; every
// endpoint parses with Prometheus' parser.
func TestCollectorExposition(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	r := NewRecorder(t0)
	r.Observe([]*v1.Pod{pod("a", v1.PodPending, 0, false), pod("b", v1.PodRunning, 2, true)}, nil, nil, t0)
	targets := []PodTarget{{UID: "uid-a", Namespace: "default", Name: "a", Cgroup: "pa",
		Containers: []ContainerTarget{{Name: "app", Cgroup: "pa/app", StartedAt: t0.Add(2 * time.Second)}}}}
	stats := fakeStats{"pa": {CPUUsageNanos: 2e9, MemoryWorkingSet: 5 << 20}, "pa/app": {CPUUsageNanos: 1.5e9, MemoryWorkingSet: 4 << 20}}
	r.Observe([]*v1.Pod{pod("a", v1.PodRunning, 0, true), pod("b", v1.PodRunning, 3, true)}, targets, stats, t0.Add(3*time.Second))
	r.Evicted("memory.available")
	r.Preempted("cpu")
	r.ContainerStarting("uid-a", ContainerType)
	r.ContainerStarting("uid-a", ContainerType) // a restart: no new pod
	r.ContainerStartFailed(ContainerType, "ErrImagePull")
	r.ProbeRan(vocab.InstanceID("uid-a", "app", 1), vocab.Readiness, true, 3*time.Millisecond)
	r.ProbeRan(vocab.InstanceID("uid-a", "app", 1), vocab.Readiness, false, time.Second)
	r.ProbeRan(vocab.InstanceID("uid-gone", "app", 1), vocab.Liveness, true, time.Millisecond) // never published: not counted

	c := NewCollector(r, Options{Version: "v9.9.9", Node: fakeNode{},
		Uplink: func() UplinkState {
			return UplinkState{Connected: true, OutboxItems: 4, OutboxOldest: 90 * time.Second}
		}})
	fams := parse(t, write(t, c.All))
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kubelet_running_pods", nil, 2},
		{"kubelet_running_containers", []string{"container_state", "running"}, 2},
		{"kubelet_pod_start_duration_seconds", nil, 1}, // a only: b was running at first sight
		{"kubelet_evictions", []string{"eviction_signal", "memory.available"}, 1},
		{"kubelet_preemptions", []string{"preemption_signal", "cpu"}, 1},
		{"kubelet_started_pods_total", nil, 1},
		{"kubelet_started_containers_total", []string{"container_type", "container"}, 2},
		{"kubelet_started_containers_errors_total", []string{"container_type", "container", "code", "ErrImagePull"}, 1},
		{"prober_probe_total", []string{"probe_type", "Readiness", "result", "successful", "pod", "a", "pod_uid", "uid-a"}, 1},
		{"prober_probe_total", []string{"probe_type", "Readiness", "result", "failed", "container", "app"}, 1},
		{"prober_probe_duration_seconds", []string{"probe_type", "Readiness", "pod", "a"}, 1}, // successes only, as the kubelet
		{"container_cpu_usage_seconds_total", []string{"container", "app", "pod", "a", "namespace", "default"}, 1.5},
		{"container_memory_working_set_bytes", []string{"container", "app", "pod", "a"}, 4 << 20},
		{"container_start_time_seconds", []string{"container", "app", "pod", "a"}, float64(t0.Unix() + 2)},
		{"pod_cpu_usage_seconds_total", []string{"pod", "a", "namespace", "default"}, 2},
		{"pod_memory_working_set_bytes", []string{"pod", "a"}, 5 << 20},
		{"node_cpu_usage_seconds_total", nil, 1234.5},
		{"node_memory_working_set_bytes", nil, 100 << 20},
		{"resource_scrape_error", nil, 0},
		{"podvisor_container_restarts_total", []string{"pod", "b", "container", "app"}, 3},
		{"podvisor_pressure_avg10_ratio", []string{"resource", "cpu"}, 0.125},
		{"podvisor_pressure_stalled_seconds_total", []string{"resource", "memory", "kind", "full"}, 0.5},
		{"podvisor_hub_connected", nil, 1},
		{"podvisor_outbox_items", nil, 4},
		{"podvisor_outbox_oldest_unacked_seconds", nil, 90},
		{"podvisor_build_info", []string{"version", "v9.9.9"}, 1},
	} {
		got, ok := sample(fams, tc.name, tc.labels...)
		if !ok || got != tc.want {
			t.Errorf("%s%v = %v (found %v), want %v", tc.name, tc.labels, got, ok, tc.want)
		}
	}
	checkFamilies(t, fams)
	if _, ok := sample(fams, "prober_probe_total", "pod_uid", "uid-gone"); ok {
		t.Error("a probe of a pod never published is counted")
	}
	if got := fams["kubelet_pod_start_duration_seconds"].Metric[0].Histogram.GetSampleSum(); got != 3 {
		t.Errorf("pod start took %vs, want 3 (first seen to running)", got)
	}
	s := c.Summary()
	if s.ContainerRestarts != 1 || s.ProbeFailures != 1 || s.Evictions != 1 || s.Preemptions != 1 || s.StartedContainersErrors != 1 ||
		s.PodsCPUSeconds != 2 || s.PodsMemoryWorkingSet != 5<<20 || s.Pressure == nil || s.Pressure.CPU != 12.5 || s.Since != t0.Unix() {
		t.Errorf("summary %+v", s)
	}

	// The kubelet's split endpoints hold only their own families.
	res := parse(t, write(t, c.Resource))
	probes := parse(t, write(t, c.Probes))
	for name := range res {
		if !strings.HasPrefix(name, "container_") && !strings.HasPrefix(name, "pod_") && !strings.HasPrefix(name, "node_") && name != "resource_scrape_error" {
			t.Errorf("/metrics/resource has %s", name)
		}
	}
	for name := range probes {
		if !strings.HasPrefix(name, "prober_") {
			t.Errorf("/metrics/probes has %s", name)
		}
	}

	// a goes: its probe series go with it, as the kubelet's workers
	// delete theirs; the counters since start stay.
	r.Observe([]*v1.Pod{pod("b", v1.PodRunning, 3, true)}, nil, stats, t0.Add(time.Minute))
	fams = parse(t, write(t, c.All))
	if _, ok := sample(fams, "prober_probe_total", "pod", "a"); ok {
		t.Error("a's probe series outlive it")
	}
	if got, _ := sample(fams, "kubelet_running_pods"); got != 1 {
		t.Errorf("running pods %v, want 1", got)
	}
	if s := c.Summary(); s.ProbeFailures != 1 || s.ContainerRestarts != 1 {
		t.Errorf("counters since start dropped with the pod: %+v", s)
	}
}

func TestHandlerAuthAndBounds(t *testing.T) {
	r := NewRecorder(time.Now())
	h := NewHandler(NewCollector(r, Options{Version: "t"}), []byte("s3cret"), nil)
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(method, path, auth string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	for _, tc := range []struct {
		method, path, auth string
		want               int
	}{
		{"GET", "/metrics", "", 401},
		{"GET", "/metrics", "Bearer wrong", 401},
		{"GET", "/metrics", "Basic czNjcmV0", 401},
		{"GET", "/metrics", "Bearer s3cret", 200},
		{"GET", "/metrics/resource", "Bearer s3cret", 200},
		{"GET", "/metrics/probes", "Bearer s3cret", 200},
		{"HEAD", "/metrics", "Bearer s3cret", 200},
		{"POST", "/metrics", "Bearer s3cret", 405},
		{"GET", "/other", "Bearer s3cret", 404},
		{"GET", "/other", "", 401}, // nothing is told without the token
	} {
		resp := get(tc.method, tc.path, tc.auth)
		if resp.StatusCode != tc.want {
			t.Errorf("%s %s (%q): %d, want %d", tc.method, tc.path, tc.auth, resp.StatusCode, tc.want)
		}
		if tc.want == 200 && resp.Header.Get("Content-Type") != metrics.ContentType {
			t.Errorf("%s: content type %q", tc.path, resp.Header.Get("Content-Type"))
		}
	}
	// Every slot taken: the next scrape is refused at once, not queued.
	for range MaxScrapes {
		h.slots <- struct{}{}
	}
	if resp := get("GET", "/metrics", "Bearer s3cret"); resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("a scrape beyond %d at once: %d, want 503", MaxScrapes, resp.StatusCode)
	}
}

func TestReadToken(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"ok": "  tok\n", "empty": "\n \n", "big": strings.Repeat("x", maxTokenBytes+1)} {
		os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600)
	}
	if tok, err := ReadToken(filepath.Join(dir, "ok")); err != nil || string(tok) != "tok" {
		t.Errorf("ok: %q %v", tok, err)
	}
	for _, name := range []string{"empty", "big", "missing"} {
		if _, err := ReadToken(filepath.Join(dir, name)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestProcNode(t *testing.T) {
	proc := t.TempDir()
	os.MkdirAll(filepath.Join(proc, "pressure"), 0o755)
	files := map[string]string{
		"stat":            "cpu  100 20 30 4000 50 6 7 8 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n",
		"meminfo":         "MemTotal:        1000 kB\nMemFree:          200 kB\nMemAvailable:     500 kB\nInactive(file):   100 kB\n",
		"pressure/cpu":    "some avg10=1.50 avg60=0.00 avg300=0.00 total=2500000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
		"pressure/memory": "some avg10=0.00 avg60=0.00 avg300=0.00 total=10\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=5\n",
	}
	for name, content := range files {
		os.WriteFile(filepath.Join(proc, name), []byte(content), 0o644)
	}
	n := ProcNode{Proc: proc}
	u, err := n.Usage()
	if err != nil {
		t.Fatal(err)
	}
	// user+nice+system+irq+softirq+steal = 100+20+30+6+7+8 ticks.
	if u.CPUSeconds != 1.71 || u.MemoryWorkingSet != 700<<10 || u.MemoryAvailable != 500<<10 {
		t.Errorf("usage %+v", u)
	}
	psi, err := n.Pressure()
	if err != nil || len(psi) != 2 || psi[0].SomeAvg10 != 1.5 || psi[0].SomeTotal != 2500*time.Millisecond || !psi[1].HasFull {
		t.Errorf("pressure %+v %v (io has no file: left out)", psi, err)
	}
	os.WriteFile(filepath.Join(proc, "pressure/io"), []byte("some avg10=x total=1\n"), 0o644)
	if _, err := n.Pressure(); err == nil || !strings.Contains(err.Error(), "pressure/io") {
		t.Errorf("a bad pressure file: %v", err)
	}
}

// Scrapes, probe workers and the loop use a recorder at once (go test
// -race checks it).
func TestRecorderConcurrentUse(t *testing.T) {
	r := NewRecorder(time.Now())
	c := NewCollector(r, Options{Node: fakeNode{}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			r.Observe([]*v1.Pod{pod("a", v1.PodRunning, int32(i), true)}, nil, fakeStats{}, time.Now())
			r.Evicted("memory.available")
		}
	}()
	go func() {
		for i := range 200 {
			r.ProbeRan(vocab.InstanceID("uid-a", "app", 1), vocab.Liveness, i%2 == 0, time.Millisecond)
		}
	}()
	for range 50 {
		parse(t, write(t, c.All))
		c.Summary()
	}
	<-done
	if s := c.Summary(); s.Evictions != 200 || s.ContainerRestarts != 199 {
		t.Errorf("summary %+v: want 200 evictions, 199 restarts", s)
	}
}

// A unix socket listener replaces a stale socket, is 0660, serves until
// its context ends and leaves no socket behind.
func TestListenUnixAndServe(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "metrics.sock")
	stale, err := Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close() // a daemon killed: its socket file stays
	ln, err := Listen("unix", sock)
	if err != nil {
		t.Fatalf("a stale socket is not replaced: %v", err)
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o660 {
		t.Fatalf("socket mode %v %v, want 0660", st.Mode(), err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() {
		served <- Serve(ctx, ln, NewHandler(NewCollector(NewRecorder(time.Now()), Options{}), nil, nil))
	}()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}
	resp, err := client.Get("http://metrics/metrics")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("scrape: %v %v", resp, err)
	}
	resp.Body.Close()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return within 5s of its context ending")
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the socket outlives the listener: %v", err)
	}
	// A regular file in the socket's place is not removed.
	os.WriteFile(sock, []byte("x"), 0o600)
	if _, err := Listen("unix", sock); err == nil {
		t.Error("a regular file was replaced by the socket")
	}
}

// checkFamilies checks an exposition where every family has samples
// against the Families table: the same families, types, help and label
// names, nothing else.
func checkFamilies(t *testing.T, fams map[string]*dto.MetricFamily) {
	t.Helper()
	if len(fams) != len(Families) {
		t.Errorf("%d families written, %d in the table", len(fams), len(Families))
	}
	for _, f := range Families {
		got := fams[f.Name]
		if got == nil {
			t.Errorf("%s: in the table, not written", f.Name)
			continue
		}
		if strings.ToLower(got.GetType().String()) != string(f.Type) || got.GetHelp() != f.Help {
			t.Errorf("%s: written as %s %q, the table says %s %q", f.Name, got.GetType(), got.GetHelp(), f.Type, f.Help)
		}
		for _, m := range got.Metric {
			var names []string
			for _, l := range m.Label {
				names = append(names, l.GetName())
			}
			if !slices.Equal(sorted(names), sorted(f.Labels)) {
				t.Errorf("%s: a sample labelled %v, the table says %v", f.Name, names, f.Labels)
			}
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
