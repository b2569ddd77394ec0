package metrics

import (
	"bytes"
	"math"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

func TestExpositionParsesWithPrometheus(t *testing.T) {
	var w Writer
	w.Family("kubelet_running_pods", "Number of pods that have a running pod sandbox", Gauge)
	w.Sample(3)
	ev := NewCounterVec("eviction_signal")
	ev.Inc("memory.available")
	ev.Add(2, "pid.available")
	w.Family("kubelet_evictions", "Cumulative number of pod evictions by eviction signal", Counter)
	ev.Write(&w)
	h := NewHist(PodStartBuckets)
	for _, v := range []float64{0.2, 0.7, 1.5, 7200} {
		h.Observe(v)
	}
	w.Family("kubelet_pod_start_duration_seconds", "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run", Histogram)
	w.HistogramSample(h.Value())
	w.Family("odd_labels", "help with a \\ backslash\nand a new line", Gauge)
	w.Sample(math.Inf(1), "pod", "a\"b\\c\nd", "namespace", "default")
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	fams := parse(t, w.Bytes())
	if got := fams["kubelet_running_pods"].Metric[0].Gauge.GetValue(); got != 3 {
		t.Errorf("running pods parsed as %v, want 3", got)
	}
	got := map[string]float64{}
	for _, m := range fams["kubelet_evictions"].Metric {
		got[m.Label[0].GetValue()] = m.Counter.GetValue()
	}
	if got["memory.available"] != 1 || got["pid.available"] != 2 {
		t.Errorf("evictions parsed as %v, want memory.available 1, pid.available 2", got)
	}
	hist := fams["kubelet_pod_start_duration_seconds"].Metric[0].Histogram
	if hist.GetSampleCount() != 4 || hist.GetSampleSum() != 0.2+0.7+1.5+7200 {
		t.Errorf("histogram count %d sum %v, want 4 and %v", hist.GetSampleCount(), hist.GetSampleSum(), 0.2+0.7+1.5+7200)
	}
	// Cumulative: ≤0.5 holds 1, ≤1 holds 2, ≤2 holds 3, ≤3600 still 3.
	for _, b := range hist.Bucket {
		want := map[float64]uint64{0.5: 1, 1: 2, 2: 3, 3600: 3}[b.GetUpperBound()]
		if want != 0 && b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v holds %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}
	odd := fams["odd_labels"]
	if odd.GetHelp() != "help with a \\ backslash\nand a new line" || labelValue(odd.Metric[0], "pod") != "a\"b\\c\nd" {
		t.Errorf("escaping did not round-trip: help %q, label %q", odd.GetHelp(), labelValue(odd.Metric[0], "pod"))
	}
}

func TestWriterRefusesMisuse(t *testing.T) {
	for name, write := range map[string]func(*Writer){
		"family twice": func(w *Writer) { w.Family("a", "", Gauge); w.Family("a", "", Gauge) },
		"bad name":     func(w *Writer) { w.Family("1a", "", Gauge) },
		"sample first": func(w *Writer) { w.Sample(1) },
		"odd labels":   func(w *Writer) { w.Family("a", "", Gauge); w.Sample(1, "pod") },
		"bad label":    func(w *Writer) { w.Family("a", "", Gauge); w.Sample(1, "a-b", "x") },
		"reserved le":  func(w *Writer) { w.Family("a", "", Gauge); w.Sample(1, "le", "x") },
	} {
		var w Writer
		write(&w)
		if w.Err() == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
