package supervisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/pressure"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// scrape writes the daemon's /metrics and parses it with Prometheus' own
// text parser.
func scrape(t *testing.T, d *Daemon) map[string]*dto.MetricFamily {
	t.Helper()
	var w metrics.Writer
	devmetrics.NewCollector(d.Metrics(), devmetrics.Options{Version: "test"}).All(&w)
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(w.Bytes()))
	if err != nil {
		t.Fatalf("Prometheus' parser refused the exposition: %v\n%s", err, w.Bytes())
	}
	return fams
}

// value is the sample of a family whose labels include these pairs.
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f := fams[name]
	if f == nil {
		t.Fatalf("no family %s", name)
	}
next:
	for _, m := range f.Metric {
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
			return m.Gauge.GetValue()
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no %s sample with labels %v", name, labels)
	return 0
}

// Three running pods are kubelet_running_pods 3, each counted once as
// started, its start observed from first sight to running.
func TestMetricsCountRunningPods(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	for i := range 3 {
		pod := fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: web%d}\nspec:\n  containers:\n  - {name: app, image: host}\n", i)
		if err := os.WriteFile(filepath.Join(d.cfg.Manifests, fmt.Sprintf("web%d.yaml", i)), []byte(pod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := d.desired.Dir().Load()
	if err != nil || len(st.Pods) != 3 {
		t.Fatalf("manifests: %v, %d pods", err, len(st.Pods))
	}
	d.setManifests(st)
	runUntil(t, d, "three pods run", func() bool {
		pods, _, _ := d.view.Pods()
		running := 0
		for _, p := range pods {
			if p.Status.Phase == "Running" {
				running++
			}
		}
		return running == 3
	})
	fams := scrape(t, d)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"kubelet_running_pods", nil, 3},
		{"kubelet_running_containers", []string{"container_state", "running"}, 3},
		{"kubelet_started_pods_total", nil, 3},
		{"kubelet_started_containers_total", []string{"container_type", "container"}, 3},
		{"kubelet_pod_start_duration_seconds", nil, 3}, // observations
		{"podvisor_container_restarts_total", []string{"pod", "web1", "container", "app"}, 0},
	} {
		if got := value(t, fams, c.name, c.labels...); got != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if s := devmetrics.NewCollector(d.Metrics(), devmetrics.Options{}).Summary(); s.RunningPods != 3 || s.RunningContainers != 3 {
		t.Errorf("summary %+v, want 3 running pods and containers", s)
	}
}

// An eviction for memory.available counts in kubelet_evictions with that
// signal, as the kubelet's eviction manager counts it.
func TestMetricsCountEviction(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	clock := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	d.now = func() time.Time { return clock }
	available := int64(900)
	notifier := pressure.NewNotifier(d.log)
	d.protector = shellProtector(t, d, nodeprotect.Options{
		Eviction: nodeprotect.EvictionConfig{Hard: map[string]string{"memory.available": "100"}},
		Observer: observerFunc(func() map[eviction.Signal]eviction.Observation {
			return map[eviction.Signal]eviction.Observation{eviction.MemoryAvailable: {Available: available, Capacity: 1000}}
		}),
		Notifier: notifier,
	})
	st := desireWebPod(t, d, `  - {name: app, image: host}`)
	uid := st.Pods[0].UID
	runUntil(t, d, "the container runs", func() bool {
		in := d.machine.Instance(uid)
		return in != nil && in.Container("app") != nil && in.Container("app").Phase == lifecycle.Running
	})
	if fams := scrape(t, d); len(fams["kubelet_evictions"].GetMetric()) != 0 {
		t.Fatalf("evictions before any: %v", fams["kubelet_evictions"])
	}
	clock = clock.Add(time.Minute)
	available = 50
	notifier.Poke(pressure.WakeThreshold)
	runUntil(t, d, "the pod is evicted", func() bool {
		in := d.machine.Instance(uid)
		return in != nil && in.Failed != nil && !in.Live()
	})
	fams := scrape(t, d)
	if got := value(t, fams, "kubelet_evictions", "eviction_signal", "memory.available"); got != 1 {
		t.Errorf(`kubelet_evictions{eviction_signal="memory.available"} = %v, want 1`, got)
	}
	if got := value(t, fams, "kubelet_running_pods"); got != 0 {
		t.Errorf("kubelet_running_pods = %v after the eviction, want 0", got)
	}
	if s := devmetrics.NewCollector(d.Metrics(), devmetrics.Options{}).Summary(); s.Evictions != 1 {
		t.Errorf("summary evictions %d, want 1", s.Evictions)
	}
}

// A container its runtime cannot create counts as a start and a start
// error with the kubelet's code, CreateContainerError.
func TestMetricsCountStartErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := shellDaemon(t, ctx, newFakeRuntime())
	d.runtimes.Registry = runtime.NewRegistry("gone")
	d.runtimes.Unavailable("gone", "runtime gone is not installed here")
	desireWebPod(t, d, `  - {name: app, image: host}`)
	runUntil(t, d, "the start error is counted", func() bool {
		_, ok := sampleOf(scrape(t, d), "kubelet_started_containers_errors_total", "code", "CreateContainerError", "container_type", "container")
		return ok
	})
	fams := scrape(t, d)
	if got := value(t, fams, "kubelet_started_containers_total", "container_type", "container"); got < 1 {
		t.Errorf("started containers %v, want the attempt counted", got)
	}
	if got := value(t, fams, "kubelet_running_pods"); got != 0 {
		t.Errorf("running pods %v, want 0", got)
	}
}

// sampleOf is value without failing: whether the sample is there.
func sampleOf(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
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
		return m.GetCounter().GetValue(), true
	}
	return 0, false
}
