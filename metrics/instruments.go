package metrics

import (
	"slices"
	"strings"
	"sync"
)

// CounterVec counts per label values (one string per label name, in
// order). It is safe for concurrent use.
type CounterVec struct {
	mu     sync.Mutex
	labels []string
	values map[string]float64
}

// NewCounterVec makes a counter with these label names.
func NewCounterVec(labels ...string) *CounterVec {
	return &CounterVec{labels: labels, values: map[string]float64{}}
}

// Add adds n to the series of these label values.
func (c *CounterVec) Add(n float64, values ...string) {
	if len(values) != len(c.labels) {
		panic("metrics: counter takes " + strings.Join(c.labels, ", "))
	}
	c.mu.Lock()
	c.values[strings.Join(values, "\x00")] += n
	c.mu.Unlock()
}

// Inc adds one.
func (c *CounterVec) Inc(values ...string) { c.Add(1, values...) }

// Total is the sum over every series.
func (c *CounterVec) Total() float64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	var t float64
	for _, v := range c.values {
		t += v
	}
	return t
}

// Write writes every series, sorted, as samples of the writer's current
// family.
func (c *CounterVec) Write(w *Writer) {
	c.mu.Lock()
	keys := make([]string, 0, len(c.values))
	for k := range c.values {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	vals := make([]float64, len(keys))
	for i, k := range keys {
		vals[i] = c.values[k]
	}
	c.mu.Unlock()
	for i, k := range keys {
		w.Sample(vals[i], pairs(c.labels, strings.Split(k, "\x00"))...)
	}
}

func pairs(names, values []string) []string {
	out := make([]string, 0, 2*len(names))
	for i, n := range names {
		out = append(out, n, values[i])
	}
	return out
}

// HistogramValue is a histogram's state: per-bucket (not cumulative)
// counts beside their upper bounds, and the sum and count of every
// observation (the +Inf bucket is Count).
type HistogramValue struct {
	Buckets []float64
	Counts  []uint64
	Sum     float64
	Count   uint64
}

// Hist is a histogram with fixed buckets, safe for concurrent use.
type Hist struct {
	mu sync.Mutex
	v  HistogramValue
}

// NewHist makes a histogram over these upper bounds (ascending).
func NewHist(buckets []float64) *Hist {
	return &Hist{v: HistogramValue{Buckets: buckets, Counts: make([]uint64, len(buckets))}}
}

// Observe records one value.
func (h *Hist) Observe(v float64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i, _ := slices.BinarySearch(h.v.Buckets, v); i < len(h.v.Buckets) {
		h.v.Counts[i]++
	}
	h.v.Sum += v
	h.v.Count++
}

// Value is a copy of the histogram's state.
func (h *Hist) Value() HistogramValue {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.v
	v.Counts = slices.Clone(h.v.Counts)
	return v
}

// Buckets of the kubelet's histograms, as its metrics package declares
// them.
var (
	// PodStartBuckets are kubelet_pod_start_duration_seconds'
	// (pkg/kubelet/metrics: 0.5 s to an hour).
	PodStartBuckets = []float64{0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600}
	// DefBuckets are Prometheus' default buckets (prober_probe_duration_seconds
	// uses them).
	DefBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
)
