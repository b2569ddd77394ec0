package devmetrics

import (
	"cmp"
	"runtime"
	"slices"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/metrics"
)

// UplinkState is the hub link as the metrics show it.
type UplinkState struct {
	Connected bool
	// OutboxItems are status items the hub has not stored yet;
	// OutboxOldest is how long the oldest of them has waited (0: none).
	OutboxItems  int
	OutboxOldest time.Duration
}

// Options are what a Collector reads besides its Recorder.
type Options struct {
	// Version is podvisor's version (podvisor_build_info).
	Version string
	// Uplink reads the hub link (nil: no hub configured, and no
	// podvisor_hub_ or podvisor_outbox_ series).
	Uplink func() UplinkState
	// Node reads the node's own usage and pressure (nil: none).
	Node NodeReader
	// Now is the clock (time.Now when nil).
	Now func() time.Time
}

// Collector writes the exposition from a Recorder's counters and what the
// loop last published, reading cgroup and /proc files on the caller's
// goroutine. Safe for concurrent use.
type Collector struct {
	rec  *Recorder
	opts Options
}

// NewCollector returns a collector over rec.
func NewCollector(rec *Recorder, o Options) *Collector {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Collector{rec: rec, opts: o}
}

// Recorder is the collector's recorder.
func (c *Collector) Recorder() *Recorder { return c.rec }

// All writes every family: what /metrics serves.
func (c *Collector) All(w *metrics.Writer) {
	st := c.rec.state.Load()
	c.kubelet(w, st)
	c.resource(w, st)
	c.probes(w)
	c.podvisor(w, st)
}

// Resource writes the container_, pod_ and node_ usage families:
// /metrics/resource, as the kubelet's resource metrics endpoint.
func (c *Collector) Resource(w *metrics.Writer) { c.resource(w, c.rec.state.Load()) }

// Probes writes the prober_ families: /metrics/probes.
func (c *Collector) Probes(w *metrics.Writer) { c.probes(w) }

// counts are the pods and containers by state.
type counts struct {
	runningPods                         int
	runningContainers, exited, waitingC int
}

func countPods(pods []*v1.Pod) counts {
	var n counts
	for _, p := range pods {
		if p.UID == "" {
			continue
		}
		if p.Status.Phase == v1.PodRunning {
			n.runningPods++
		}
		for _, cs := range allStatuses(p) {
			switch {
			case cs.State.Running != nil:
				n.runningContainers++
			case cs.State.Terminated != nil || cs.LastTerminationState.Terminated != nil:
				n.exited++
			case cs.State.Waiting != nil && cs.State.Waiting.Reason == "ContainerCreating":
				n.waitingC++
			}
		}
	}
	return n
}

// kubelet writes the kubelet_ families, with the kubelet's help texts.
func (c *Collector) kubelet(w *metrics.Writer, st *state) {
	n := countPods(st.pods)
	family(w, "kubelet_running_pods")
	w.Sample(float64(n.runningPods))
	family(w, "kubelet_running_containers")
	w.Sample(float64(n.waitingC), "container_state", "created")
	w.Sample(float64(n.exited), "container_state", "exited")
	w.Sample(float64(n.runningContainers), "container_state", "running")
	family(w, "kubelet_pod_start_duration_seconds")
	w.HistogramSample(c.rec.podStart.Value())
	family(w, "kubelet_evictions")
	c.rec.evictions.Write(w)
	family(w, "kubelet_preemptions")
	c.rec.preemptions.Write(w)
	family(w, "kubelet_started_pods_total")
	w.Sample(float64(c.rec.startedPods.Load()))
	family(w, "kubelet_started_containers_total")
	c.rec.startedContainers.Write(w)
	family(w, "kubelet_started_containers_errors_total")
	c.rec.startedContainerErrors.Write(w)
}

// usage is one scrape's reading of the pods' cgroups.
type usage struct{ pods []podUsage }

type podUsage struct {
	t          *PodTarget
	cpu, mem   uint64
	read       bool
	containers []containerUsage
}

type containerUsage struct {
	t        *ContainerTarget
	cpu, mem uint64
}

// readUsage reads every target's cgroup (the containers' too when
// containers is set); a cgroup that cannot be read
// (its container just ended) is left out, and makes the scrape's
// resource_scrape_error 1 only when nothing could be read at all.
func readUsage(st *state, containers bool) usage {
	var u usage
	if st.stats == nil || len(st.targets) == 0 {
		return u
	}
	u.pods = make([]podUsage, 0, len(st.targets))
	for i := range st.targets {
		t := &st.targets[i]
		pu := podUsage{t: t}
		if s, err := st.stats.Stats(t.Cgroup); err == nil {
			pu.cpu, pu.mem, pu.read = s.CPUUsageNanos, s.MemoryWorkingSet, true
		}
		for j := range t.Containers {
			if !containers {
				break // the heartbeat's summary: pods only
			}
			ct := &t.Containers[j]
			if s, err := st.stats.Stats(ct.Cgroup); err == nil {
				pu.containers = append(pu.containers, containerUsage{t: ct, cpu: s.CPUUsageNanos, mem: s.MemoryWorkingSet})
			}
		}
		u.pods = append(u.pods, pu)
	}
	return u
}

// resource writes the kubelet's resource metrics (its
// collectors/resource_metrics.go names, help and labels).
func (c *Collector) resource(w *metrics.Writer, st *state) {
	var node NodeUsage
	nodeErr := error(nil)
	if c.opts.Node != nil {
		node, nodeErr = c.opts.Node.Usage()
	}
	u := readUsage(st, true)
	family(w, "node_cpu_usage_seconds_total")
	if node.CPUSeconds > 0 {
		w.Sample(node.CPUSeconds)
	}
	family(w, "node_memory_working_set_bytes")
	if node.MemoryWorkingSet > 0 {
		w.Sample(float64(node.MemoryWorkingSet))
	}
	family(w, "container_start_time_seconds")
	eachContainer(u, func(p *podUsage, cu containerUsage) {
		if !cu.t.StartedAt.IsZero() {
			w.Sample(float64(cu.t.StartedAt.UnixNano())/1e9, "container", cu.t.Name, "pod", p.t.Name, "namespace", p.t.Namespace)
		}
	})
	family(w, "container_cpu_usage_seconds_total")
	eachContainer(u, func(p *podUsage, cu containerUsage) {
		w.Sample(float64(cu.cpu)/1e9, "container", cu.t.Name, "pod", p.t.Name, "namespace", p.t.Namespace)
	})
	family(w, "container_memory_working_set_bytes")
	eachContainer(u, func(p *podUsage, cu containerUsage) {
		w.Sample(float64(cu.mem), "container", cu.t.Name, "pod", p.t.Name, "namespace", p.t.Namespace)
	})
	family(w, "pod_cpu_usage_seconds_total")
	for _, p := range u.pods {
		if p.read {
			w.Sample(float64(p.cpu)/1e9, "pod", p.t.Name, "namespace", p.t.Namespace)
		}
	}
	family(w, "pod_memory_working_set_bytes")
	for _, p := range u.pods {
		if p.read {
			w.Sample(float64(p.mem), "pod", p.t.Name, "namespace", p.t.Namespace)
		}
	}
	family(w, "resource_scrape_error")
	if nodeErr != nil {
		w.Sample(1)
	} else {
		w.Sample(0)
	}
}

func eachContainer(u usage, f func(*podUsage, containerUsage)) {
	for i := range u.pods {
		for _, cu := range u.pods[i].containers {
			f(&u.pods[i], cu)
		}
	}
}

// probes writes the kubelet prober's families.
func (c *Collector) probes(w *metrics.Writer) {
	s := &c.rec.probes
	s.mu.Lock()
	type row struct {
		k probeKey
		c probeCounts
	}
	rows := make([]row, 0, len(s.series))
	for k, v := range s.series {
		r := row{k: k, c: *v}
		r.c.duration.Counts = slices.Clone(v.duration.Counts)
		rows = append(rows, r)
	}
	s.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.c.namespace, b.c.namespace), cmp.Compare(a.c.pod, b.c.pod),
			cmp.Compare(a.k.container, b.k.container), cmp.Compare(a.k.kind, b.k.kind), cmp.Compare(a.k.uid, b.k.uid))
	})
	family(w, "prober_probe_total")
	for _, r := range rows {
		for _, res := range []struct {
			name string
			n    uint64
		}{{"failed", r.c.failed}, {"successful", r.c.successful}} {
			if res.n > 0 {
				w.Sample(float64(res.n), "probe_type", r.k.kind, "result", res.name, "container", r.k.container,
					"pod", r.c.pod, "namespace", r.c.namespace, "pod_uid", string(r.k.uid))
			}
		}
	}
	family(w, "prober_probe_duration_seconds")
	for _, r := range rows {
		if r.c.durationInitialized {
			w.HistogramSample(r.c.duration, "probe_type", r.k.kind, "container", r.k.container, "pod", r.c.pod, "namespace", r.c.namespace)
		}
	}
}

// podvisor writes podvisor's own families.
func (c *Collector) podvisor(w *metrics.Writer, st *state) {
	family(w, "podvisor_container_restarts_total")
	for _, p := range st.pods {
		if p.UID == "" {
			continue
		}
		for _, cs := range allStatuses(p) {
			w.Sample(float64(cs.RestartCount), "namespace", p.Namespace, "pod", p.Name, "container", cs.Name)
		}
	}
	if c.opts.Node != nil {
		if psi, err := c.opts.Node.Pressure(); err == nil && len(psi) > 0 {
			family(w, "podvisor_pressure_avg10_ratio")
			for _, p := range psi {
				w.Sample(p.SomeAvg10/100, "resource", p.Resource)
			}
			family(w, "podvisor_pressure_stalled_seconds_total")
			for _, p := range psi {
				w.Sample(p.SomeTotal.Seconds(), "resource", p.Resource, "kind", "some")
				if p.HasFull {
					w.Sample(p.FullTotal.Seconds(), "resource", p.Resource, "kind", "full")
				}
			}
		}
	}
	if c.opts.Uplink != nil {
		u := c.opts.Uplink()
		family(w, "podvisor_hub_connected")
		w.Sample(boolValue(u.Connected))
		family(w, "podvisor_outbox_items")
		w.Sample(float64(u.OutboxItems))
		family(w, "podvisor_outbox_oldest_unacked_seconds")
		w.Sample(u.OutboxOldest.Seconds())
	}
	family(w, "podvisor_build_info")
	w.Sample(1, "version", c.opts.Version, "goversion", runtime.Version())
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
