// Package hubmetrics is podhub's Prometheus /metrics: the fleet as the
// hub's database holds it (devices by state, pods by phase, workloads'
// replicas, updates' devices), what the device link counted (status
// items, heartbeats, refused messages), and each device's metrics
// snapshot from its heartbeat re-exported with a device label, for the
// devices Prometheus cannot scrape itself. Every scrape reads the
// database afresh; nothing is kept between scrapes but the counters.
package hubmetrics

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/updates"
)

// Config is what the metrics read.
type Config struct {
	Fleet *fleetdb.Fleet
	// Workloads are the scheduler's tables; nil: no workload series.
	Workloads *workloaddb.Store
	// Timeout is how long a device may be silent and still be Ready
	// (default fleetdb.DefaultDeviceTimeout), as podhub get devices.
	Timeout time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Counters are the device link's (its Config.Observe); nil: New
	// makes its own, which nothing feeds.
	Counters *Counters
	// Version is podhub's, for podhub_build_info ("unknown" if empty).
	Version string
}

// Metrics is the hub's /metrics handler.
type Metrics struct {
	cfg Config
	// scrape lets one scrape read the fleet at a time: a flood of
	// requests waits its turn (or gives up with its request) instead of
	// piling reads onto the database.
	scrape chan struct{}
}

// New makes the handler.
func New(cfg Config) *Metrics {
	if cfg.Timeout <= 0 {
		cfg.Timeout = fleetdb.DefaultDeviceTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Counters == nil {
		cfg.Counters = NewCounters()
	}
	if cfg.Version == "" {
		cfg.Version = "unknown"
	}
	return &Metrics{cfg: cfg, scrape: make(chan struct{}, 1)}
}

// Counters are the counters the exposition reads.
func (m *Metrics) Counters() *Counters { return m.cfg.Counters }

// ServeHTTP answers GET and HEAD with the exposition (gzipped when the
// client accepts it, as Prometheus does).
func (m *Metrics) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "hub metrics: method "+r.Method+" not allowed (GET or HEAD)", http.StatusMethodNotAllowed)
		return
	}
	body, err := m.Exposition(r.Context())
	if err != nil {
		http.Error(w, "hub metrics: "+err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Header().Set("Content-Type", metrics.ContentType)
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Add("Vary", "Accept-Encoding")
		if r.Method == http.MethodHead {
			return
		}
		zw, _ := gzip.NewWriterLevel(w, gzip.BestSpeed)
		zw.Write(body)
		zw.Close()
		return
	}
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	if r.Method == http.MethodGet {
		w.Write(body)
	}
}

func acceptsGzip(header string) bool {
	for part := range strings.SplitSeq(header, ",") {
		coding, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(coding), "gzip") && strings.ReplaceAll(strings.TrimSpace(params), " ", "") != "q=0" {
			return true
		}
	}
	return false
}

// Exposition reads the fleet and writes every family, waiting for a
// scrape in progress (at most until ctx ends).
func (m *Metrics) Exposition(ctx context.Context) ([]byte, error) {
	select {
	case m.scrape <- struct{}{}:
		defer func() { <-m.scrape }()
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the scrape in progress: %w", ctx.Err())
	}
	s, err := m.read()
	if err != nil {
		return nil, err
	}
	var w metrics.Writer
	m.write(&w, s)
	if err := w.Err(); err != nil {
		return nil, err
	}
	return w.Bytes(), nil
}

// state is one scrape's reading of the fleet.
type state struct {
	now       time.Time
	devices   []fleetdb.Device
	phases    map[string]int
	workloads workloaddb.Workloads
	updates   []update
}

type update struct {
	name   string
	status updates.Status
}

func (m *Metrics) read() (state, error) {
	s := state{now: m.cfg.Now()}
	var err error
	if s.devices, err = m.cfg.Fleet.DeviceStates(s.now, m.cfg.Timeout); err != nil {
		return s, fmt.Errorf("reading the devices: %w", err)
	}
	if s.phases, err = m.podPhases(); err != nil {
		return s, fmt.Errorf("reading the pods' phases: %w", err)
	}
	if m.cfg.Workloads != nil {
		if s.workloads, err = m.cfg.Workloads.LoadWorkloads(); err != nil {
			return s, fmt.Errorf("reading the workloads: %w", err)
		}
	}
	stored, err := m.cfg.Fleet.Updates(true)
	if err != nil {
		return s, fmt.Errorf("reading the updates: %w", err)
	}
	for _, u := range stored {
		var st updates.Status
		if err := json.Unmarshal(u.Status, &st); err != nil {
			return s, fmt.Errorf("update %s: decoding its stored status: %w", u.Name, err)
		}
		s.updates = append(s.updates, update{u.Name, st})
	}
	slices.SortFunc(s.updates, func(a, b update) int { return strings.Compare(a.name, b.name) })
	return s, nil
}

// podPhases counts the pods the Kubernetes API at the hub lists, by
// phase: every device's mirror pods, and the hub's pods no device
// reports yet (unbound, or bound and not in their device's report) as
// Pending, the only phase the hub stores for a pod. A hub pod's mirror
// is matched as the controllers match it: its device's scheduled mirror
// of its key.
func (m *Metrics) podPhases() (map[string]int, error) {
	phases, err := m.cfg.Fleet.MirrorPhases()
	if err != nil || m.cfg.Workloads == nil {
		return phases, err
	}
	hub, err := m.cfg.Workloads.HubPodPlacements()
	if err != nil {
		return nil, err
	}
	reported := make(map[[2]string]bool, len(hub))
	if err := m.cfg.Fleet.ScheduledMirrorKeys(func(device, key string) { reported[[2]string{device, key}] = true }); err != nil {
		return nil, err
	}
	for _, p := range hub {
		if p.Device == "" || !reported[[2]string{p.Device, p.Key.String()}] {
			phases[string(v1.PodPending)]++
		}
	}
	return phases, nil
}

// Device states, as podhub_devices' state label says them.
const (
	StateReady    = "ready"
	StateNotReady = "not_ready"
	StateOffline  = "offline"
	StateFenced   = "fenced"
)

// deviceState is one device's state: fenced whatever else it is, then
// offline (its presence says so), then ready or not.
func deviceState(d *fleetdb.Device) string {
	switch {
	case d.FencedAt != nil:
		return StateFenced
	case !d.Online:
		return StateOffline
	case d.Ready:
		return StateReady
	}
	return StateNotReady
}

// phases are the pod phases Kubernetes defines; anything else a device
// reports is counted Unknown, so the phase label stays bounded.
var phases = []string{"Pending", "Running", "Succeeded", "Failed", "Unknown"}

func (m *Metrics) write(w *metrics.Writer, s state) {
	counts := map[string]int{}
	pending := 0
	for i := range s.devices {
		counts[deviceState(&s.devices[i])]++
		if s.devices[i].ObservedGeneration < s.devices[i].Generation {
			pending++
		}
	}
	start(w, famDevices)
	for _, st := range []string{StateReady, StateNotReady, StateOffline, StateFenced} {
		sample(w, famDevices, float64(counts[st]), st)
	}

	byPhase := map[string]int{}
	for p, n := range s.phases {
		if !slices.Contains(phases, p) {
			p = "Unknown"
		}
		byPhase[p] += n
	}
	start(w, famPods)
	for _, p := range phases {
		sample(w, famPods, float64(byPhase[p]), p)
	}

	start(w, famPendingAck)
	sample(w, famPendingAck, float64(pending))

	c := m.cfg.Counters
	start(w, famStatusItems)
	sample(w, famStatusItems, float64(c.statusItems.Load()))
	start(w, famHeartbeats)
	sample(w, famHeartbeats, float64(c.heartbeats.Load()))
	start(w, famRefused)
	kinds, refused := c.refusedByKind()
	for i, k := range kinds {
		sample(w, famRefused, float64(refused[i]), k)
	}
	start(w, famNotOwned)
	kinds, notOwned := c.notOwnedByKind()
	for i, k := range kinds {
		sample(w, famNotOwned, float64(notOwned[i]), k)
	}

	start(w, famWorkloadReplicas)
	writeWorkloads(w, s.workloads)

	start(w, famUpdateDevices)
	for _, u := range s.updates {
		byState := map[string]int{}
		for _, d := range u.status.Devices {
			byState[d.State]++
		}
		for _, st := range slices.Sorted(maps.Keys(byState)) {
			sample(w, famUpdateDevices, float64(byState[st]), u.name, st)
		}
	}

	start(w, famBuildInfo)
	sample(w, famBuildInfo, 1, m.cfg.Version, runtime.Version())

	writeDevices(w, s)
}

// writeWorkloads writes each workload's replicas by state, in the order
// the store keeps them (kind, namespace, name).
func writeWorkloads(w *metrics.Writer, wl workloaddb.Workloads) {
	replicas := func(kind, ns, name string, desired, updated, ready, available int32) {
		for _, v := range []struct {
			state string
			n     int32
		}{{"desired", desired}, {"updated", updated}, {"ready", ready}, {"available", available}} {
			sample(w, famWorkloadReplicas, float64(v.n), kind, ns, name, v.state)
		}
	}
	for _, d := range wl.DaemonSets {
		st := d.Status
		replicas(workloaddb.KindDaemonSet, d.Namespace, d.Name, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable)
	}
	for _, d := range wl.Deployments {
		st := d.Status
		replicas(workloaddb.KindDeployment, d.Namespace, d.Name, specReplicas(d.Spec.Replicas), st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas)
	}
	for _, s := range wl.StatefulSets {
		st := s.Status
		replicas(workloaddb.KindStatefulSet, s.Namespace, s.Name, specReplicas(s.Spec.Replicas), st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas)
	}
}

// specReplicas is spec.replicas with the API server's default, 1.
func specReplicas(r *int32) int32 {
	if r == nil {
		return 1
	}
	return *r
}

// writeDevices writes the per-device families, devices in ID order.
// Only a Ready device's snapshot is re-exported: the newest heartbeat of
// a device gone silent or offline says what it ran then, not now, and a
// series the hub cannot vouch for is better absent (a graph shows the
// gap) than frozen at its last value. A device without a snapshot has
// no snapshot series.
func writeDevices(w *metrics.Writer, s state) {
	start(w, famDeviceInfo)
	for _, d := range s.devices {
		sample(w, famDeviceInfo, 1, d.ID, bounded(d.Version))
	}
	start(w, famDeviceReady)
	for _, d := range s.devices {
		sample(w, famDeviceReady, boolFloat(d.Ready), d.ID)
	}
	start(w, famDeviceLastSeen)
	for _, d := range s.devices {
		if !d.LastSeen.IsZero() {
			sample(w, famDeviceLastSeen, float64(d.LastSeen.UnixMilli())/1000, d.ID)
		}
	}
	for _, f := range snapshotFamilies {
		start(w, f.Family)
		for _, d := range s.devices {
			if d.Metrics == nil || !d.Ready {
				continue
			}
			for _, v := range f.values(d.Metrics) {
				if len(f.Labels) > 1 {
					sample(w, f.Family, v.value, d.ID, v.label)
				} else {
					sample(w, f.Family, v.value, d.ID)
				}
			}
		}
	}
}

// maxReportedLabel bounds a label value a device reports (its version):
// a heartbeat is bounded only as a whole, and a device must not make
// every scrape carry kilobytes of its choosing.
const maxReportedLabel = 128

// bounded cuts s to maxReportedLabel bytes at a character's boundary,
// marking the cut.
func bounded(s string) string {
	if len(s) <= maxReportedLabel {
		return s
	}
	cut := maxReportedLabel
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// start begins a family from the table.
func start(w *metrics.Writer, f *Family) { w.Family(f.Name, f.Help, f.Type) }

// sample writes one sample of f with its labels' values, in the table's
// order.
func sample(w *metrics.Writer, f *Family, v float64, values ...string) {
	if len(values) != len(f.Labels) {
		panic(fmt.Sprintf("hubmetrics: %s takes labels %v, got %d values", f.Name, f.Labels, len(values)))
	}
	pairs := make([]string, 0, 2*len(values))
	for i, l := range f.Labels {
		pairs = append(pairs, l, values[i])
	}
	w.Sample(v, pairs...)
}
