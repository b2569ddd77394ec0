package devmetrics

import "github.com/podvisor/podvisor/metrics"

// Family is one metric family the device writes: its name, help, type and
// label names (a histogram's le aside), as the kubelet declares it where
// the kubelet has it. Families is the table the exposition is written
// from, and what dashboards and the hub's tests may check their queries
// against (docs/metrics.md lists them).
type Family struct {
	Name   string
	Help   string
	Type   metrics.Type
	Labels []string
}

// Families are every family of /metrics, in the order written.
var Families = []Family{
	{"kubelet_running_pods", "Number of pods that have a running pod sandbox", metrics.Gauge, nil},
	{"kubelet_running_containers", "Number of containers currently running", metrics.Gauge, []string{"container_state"}},
	{"kubelet_pod_start_duration_seconds", "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run", metrics.Histogram, nil},
	{"kubelet_evictions", "Cumulative number of pod evictions by eviction signal", metrics.Counter, []string{"eviction_signal"}},
	{"kubelet_preemptions", "Cumulative number of pod preemptions by preemption resource", metrics.Counter, []string{"preemption_signal"}},
	{"kubelet_started_pods_total", "Cumulative number of pods started", metrics.Counter, nil},
	{"kubelet_started_containers_total", "Cumulative number of containers started", metrics.Counter, []string{"container_type"}},
	{"kubelet_started_containers_errors_total", "Cumulative number of errors when starting containers", metrics.Counter, []string{"container_type", "code"}},
	{"node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds", metrics.Counter, nil},
	{"node_memory_working_set_bytes", "Current working set of the node in bytes", metrics.Gauge, nil},
	{"container_start_time_seconds", "Start time of the container since unix epoch in seconds", metrics.Gauge, []string{"container", "pod", "namespace"}},
	{"container_cpu_usage_seconds_total", "Cumulative cpu time consumed by the container in core-seconds", metrics.Counter, []string{"container", "pod", "namespace"}},
	{"container_memory_working_set_bytes", "Current working set of the container in bytes", metrics.Gauge, []string{"container", "pod", "namespace"}},
	{"pod_cpu_usage_seconds_total", "Cumulative cpu time consumed by the pod in core-seconds", metrics.Counter, []string{"pod", "namespace"}},
	{"pod_memory_working_set_bytes", "Current working set of the pod in bytes", metrics.Gauge, []string{"pod", "namespace"}},
	{"resource_scrape_error", "1 if there was an error while getting container metrics, 0 otherwise", metrics.Gauge, nil},
	{"prober_probe_total", "Cumulative number of a liveness, readiness or startup probe for a container by result.", metrics.Counter, []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}},
	{"prober_probe_duration_seconds", "Duration in seconds for a probe response.", metrics.Histogram, []string{"probe_type", "container", "pod", "namespace"}},
	{"podvisor_container_restarts_total", "Restarts of each container of the pods on the device: its status' restartCount.", metrics.Counter, []string{"namespace", "pod", "container"}},
	{"podvisor_pressure_avg10_ratio", "The share of the last 10 seconds in which some tasks stalled on the resource (PSI some avg10, 0 to 1).", metrics.Gauge, []string{"resource"}},
	{"podvisor_pressure_stalled_seconds_total", "Time in seconds some (kind=some) or all (kind=full) non-idle tasks stalled on the resource (PSI total).", metrics.Counter, []string{"resource", "kind"}},
	{"podvisor_hub_connected", "1 while the device is connected to its hub's broker, else 0.", metrics.Gauge, nil},
	{"podvisor_outbox_items", "Status items and events waiting for the hub's receipt.", metrics.Gauge, nil},
	{"podvisor_outbox_oldest_unacked_seconds", "How long the oldest item in the outbox has waited for the hub's receipt (0: empty).", metrics.Gauge, nil},
	{"podvisor_build_info", "podvisor's version and the Go version it was built with; always 1.", metrics.Gauge, []string{"version", "goversion"}},
}

// byName indexes Families.
var byName = func() map[string]Family {
	m := make(map[string]Family, len(Families))
	for _, f := range Families {
		m[f.Name] = f
	}
	return m
}()

// family starts the named family of the table (its help and type).
func family(w *metrics.Writer, name string) {
	f, ok := byName[name]
	if !ok {
		panic("devmetrics: family " + name + " is not in Families")
	}
	w.Family(f.Name, f.Help, f.Type)
}
