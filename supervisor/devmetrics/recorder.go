// Package devmetrics is the device's Prometheus metrics: the kubelet's
// own names and labels where the kubelet has the metric (so kubelet
// dashboards, alerts and recording rules work unchanged), podvisor_ for
// the rest. The daemon's loop feeds a Recorder its events (evictions,
// starts, the pods it published); a Collector writes the exposition on
// the scraper's goroutine from what the loop last published and from the
// kernel's files, never waiting for the loop; a Server serves it
// (docs/metrics.md).
package devmetrics

import (
	"maps"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/pod/vocab"
)

// The kubelet's container_type label values (pkg/kubelet/metrics).
const (
	ContainerType     = "container"
	InitContainerType = "init_container"
)

// StatsReader reads a cgroup's usage (a cgroups.Driver); safe to call
// from any goroutine, as it only reads the cgroup's files.
type StatsReader interface {
	Stats(path string) (cgroups.Stats, error)
}

// PodTarget is where a running pod's usage is read: its cgroup and its
// running containers' cgroups.
type PodTarget struct {
	UID        types.UID
	Namespace  string
	Name       string
	Cgroup     string
	Containers []ContainerTarget
}

// ContainerTarget is a running container's cgroup and start.
type ContainerTarget struct {
	Name      string
	Cgroup    string
	StartedAt time.Time
}

// state is what the loop last published, read by scrapes.
type state struct {
	pods    []*v1.Pod
	targets []PodTarget
	stats   StatsReader // nil: no cgroups
	names   map[types.UID][2]string
}

// Recorder holds the counters the loop's events feed and what it last
// published. Its event methods are safe from any goroutine but Observe
// and ContainerStarting, which are the loop's.
type Recorder struct {
	since time.Time

	evictions              *metrics.CounterVec // eviction_signal
	preemptions            *metrics.CounterVec // preemption_signal
	startedContainers      *metrics.CounterVec // container_type
	startedContainerErrors *metrics.CounterVec // container_type, code
	startedPods            atomic.Uint64
	podStart               *metrics.Hist
	restarts               atomic.Uint64 // container restarts seen since since
	probes                 probeSeries

	state atomic.Pointer[state]
	// tracks: per pod instance, loop-owned (Observe).
	tracks map[types.UID]*podTrack
	// sandboxes are the pod instances counted started (or adopted
	// running), loop-owned (ContainerStarting, Observe).
	sandboxes map[types.UID]bool
}

// podTrack is what Observe remembers of a pod between calls.
type podTrack struct {
	firstSeen time.Time
	// started: running once seen running (or adopted so), its start
	// observed or never to be.
	started  bool
	restarts map[string]int32
}

// NewRecorder returns a recorder whose counters count from since.
func NewRecorder(since time.Time) *Recorder {
	r := &Recorder{since: since,
		evictions:              metrics.NewCounterVec("eviction_signal"),
		preemptions:            metrics.NewCounterVec("preemption_signal"),
		startedContainers:      metrics.NewCounterVec("container_type"),
		startedContainerErrors: metrics.NewCounterVec("container_type", "code"),
		podStart:               metrics.NewHist(metrics.PodStartBuckets),
		probes:                 probeSeries{series: map[probeKey]*probeCounts{}},
		tracks:                 map[types.UID]*podTrack{},
		sandboxes:              map[types.UID]bool{},
	}
	r.state.Store(&state{})
	return r
}

// Since is when the counters started.
func (r *Recorder) Since() time.Time { return r.since }

// Evicted counts a pressure eviction by its signal (memory.available,
// nodefs.available, …), as kubelet_evictions does.
func (r *Recorder) Evicted(signal string) { r.evictions.Inc(signal) }

// Preempted counts a pod preempted to admit another, by the first
// resource the other lacked (cpu, memory, …; "" when unknown), as
// kubelet_preemptions does.
func (r *Recorder) Preempted(resource string) { r.preemptions.Inc(resource) }

// ContainerStarting counts a container start attempt of a pod instance
// (kubelet_started_containers_total; typ is ContainerType or
// InitContainerType), and the instance's first as a pod started
// (kubelet_started_pods_total: the kubelet counts sandboxes made). The
// loop's, as Observe.
func (r *Recorder) ContainerStarting(pod types.UID, typ string) {
	r.startedContainers.Inc(typ)
	if !r.sandboxes[pod] {
		r.sandboxes[pod] = true
		r.startedPods.Add(1)
	}
}

// ContainerStartFailed counts a start that failed, by the kubelet's
// reason (CreateContainerError, ErrImagePull, RunContainerError, …).
func (r *Recorder) ContainerStartFailed(typ, code string) { r.startedContainerErrors.Inc(typ, code) }

// ContainerTypeOf is the kubelet's container_type of a pod's container:
// init_container for init containers (sidecars included), else container.
func ContainerTypeOf(pod *v1.Pod, container string) string {
	for _, c := range pod.Spec.InitContainers {
		if c.Name == container {
			return InitContainerType
		}
	}
	return ContainerType
}

// ProbeRan counts one probe run of a container instance (from the probe
// workers' goroutines): prober_probe_total by result, and
// prober_probe_duration_seconds of a successful one, as the kubelet's
// workers do. A run of a pod not yet published is not counted.
func (r *Recorder) ProbeRan(instanceID string, kind vocab.ProbeKind, ok bool, took time.Duration) {
	uid, container, _, valid := vocab.ParseInstanceID(instanceID)
	if !valid {
		return
	}
	name, known := r.state.Load().names[uid]
	if !known {
		return
	}
	r.probes.ran(probeKey{kind: string(kind), uid: uid, container: container}, name[0], name[1], ok, took)
}

// Observe takes the pods the loop just published, where their usage is
// read and the cgroups' reader (nil: none), at now. It observes pod
// starts (kubelet_pod_start_duration_seconds: from the daemon first
// seeing a pod to it running; pods adopted running are not observed) and
// restarts, and forgets the probe series of pods that are gone.
func (r *Recorder) Observe(pods []*v1.Pod, targets []PodTarget, stats StatsReader, now time.Time) {
	names := make(map[types.UID][2]string, len(pods))
	for _, p := range pods {
		if p.UID == "" {
			continue // a rejected manifest's row
		}
		names[p.UID] = [2]string{p.Namespace, p.Name}
		t := r.tracks[p.UID]
		if t == nil {
			t = &podTrack{firstSeen: now, started: p.Status.Phase != v1.PodPending, restarts: map[string]int32{}}
			if t.started {
				r.sandboxes[p.UID] = true // adopted: started by an earlier daemon
			}
			r.tracks[p.UID] = t
			for _, cs := range allStatuses(p) {
				t.restarts[cs.Name] = cs.RestartCount
			}
		}
		if !t.started && p.Status.Phase == v1.PodRunning {
			t.started = true
			r.podStart.Observe(now.Sub(t.firstSeen).Seconds())
		}
		for _, cs := range allStatuses(p) {
			if prev, ok := t.restarts[cs.Name]; ok && cs.RestartCount > prev {
				r.restarts.Add(uint64(cs.RestartCount - prev))
			}
			t.restarts[cs.Name] = cs.RestartCount
		}
	}
	for uid := range r.tracks {
		if _, ok := names[uid]; !ok {
			delete(r.tracks, uid)
		}
	}
	for uid := range r.sandboxes {
		if _, ok := names[uid]; !ok {
			delete(r.sandboxes, uid)
		}
	}
	r.probes.keep(names)
	r.state.Store(&state{pods: pods, targets: targets, stats: stats, names: names})
}

func allStatuses(p *v1.Pod) []v1.ContainerStatus {
	if len(p.Status.InitContainerStatuses) == 0 {
		return p.Status.ContainerStatuses
	}
	return append(append([]v1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
}

// probeKey is one probe of one container of one pod instance.
type probeKey struct {
	kind      string
	uid       types.UID
	container string
}

// probeCounts are one probe's series.
type probeCounts struct {
	namespace, pod      string
	successful, failed  uint64
	duration            metrics.HistogramValue
	durationInitialized bool
}

// probeSeries are the prober_ series, dropped with their pod as the
// kubelet's workers delete theirs.
type probeSeries struct {
	mu       sync.Mutex
	series   map[probeKey]*probeCounts
	failures uint64 // every failed run since start, gone pods' included
}

func (s *probeSeries) ran(k probeKey, namespace, pod string, ok bool, took time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.series[k]
	if c == nil {
		c = &probeCounts{namespace: namespace, pod: pod}
		s.series[k] = c
	}
	if !ok {
		c.failed++
		s.failures++
		return
	}
	c.successful++
	if !c.durationInitialized {
		c.duration = metrics.HistogramValue{Buckets: metrics.DefBuckets, Counts: make([]uint64, len(metrics.DefBuckets))}
		c.durationInitialized = true
	}
	observe(&c.duration, took.Seconds())
}

// keep drops the series of pods not in names.
func (s *probeSeries) keep(names map[types.UID][2]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.DeleteFunc(s.series, func(k probeKey, _ *probeCounts) bool {
		_, ok := names[k.uid]
		return !ok
	})
}

// observe adds v to a histogram value (per-bucket counts).
func observe(h *metrics.HistogramValue, v float64) {
	for i, upper := range h.Buckets {
		if v <= upper {
			h.Counts[i]++
			break
		}
	}
	h.Sum += v
	h.Count++
}
