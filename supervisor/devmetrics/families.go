package devmetrics

import "github.com/podvisor/podvisor/metrics"

// Family is one metric family the device writes: its name, help, type and
// label names (a histogram's le aside), as the kubelet declares it where
// the kubelet has it. Families is the table the exposition is written
// from, and what dashboards and the hub's tests may check their queries
// against (docs/metrics.md lists them).
type Family = metrics.Family

// Families are every family of /metrics, in the order written.
var Families = []Family{
	{Name: "kubelet_running_pods", Help: "Number of pods that have a running pod sandbox", Type: metrics.Gauge},
	{Name: "kubelet_running_containers", Help: "Number of containers currently running", Type: metrics.Gauge, Labels: []string{"container_state"}},
	{Name: "kubelet_pod_start_duration_seconds", Help: "Duration in seconds from kubelet seeing a pod for the first time to the pod starting to run", Type: metrics.Histogram},
	{Name: "kubelet_evictions", Help: "Cumulative number of pod evictions by eviction signal", Type: metrics.Counter, Labels: []string{"eviction_signal"}},
	{Name: "kubelet_preemptions", Help: "Cumulative number of pod preemptions by preemption resource", Type: metrics.Counter, Labels: []string{"preemption_signal"}},
	{Name: "kubelet_started_pods_total", Help: "Cumulative number of pods started", Type: metrics.Counter},
	{Name: "kubelet_started_containers_total", Help: "Cumulative number of containers started", Type: metrics.Counter, Labels: []string{"container_type"}},
	{Name: "kubelet_started_containers_errors_total", Help: "Cumulative number of errors when starting containers", Type: metrics.Counter, Labels: []string{"container_type", "code"}},
	{Name: "node_cpu_usage_seconds_total", Help: "Cumulative cpu time consumed by the node in core-seconds", Type: metrics.Counter},
	{Name: "node_memory_working_set_bytes", Help: "Current working set of the node in bytes", Type: metrics.Gauge},
	{Name: "container_start_time_seconds", Help: "Start time of the container since unix epoch in seconds", Type: metrics.Gauge, Labels: []string{"container", "pod", "namespace"}},
	{Name: "container_cpu_usage_seconds_total", Help: "Cumulative cpu time consumed by the container in core-seconds", Type: metrics.Counter, Labels: []string{"container", "pod", "namespace"}},
	{Name: "container_memory_working_set_bytes", Help: "Current working set of the container in bytes", Type: metrics.Gauge, Labels: []string{"container", "pod", "namespace"}},
	{Name: "pod_cpu_usage_seconds_total", Help: "Cumulative cpu time consumed by the pod in core-seconds", Type: metrics.Counter, Labels: []string{"pod", "namespace"}},
	{Name: "pod_memory_working_set_bytes", Help: "Current working set of the pod in bytes", Type: metrics.Gauge, Labels: []string{"pod", "namespace"}},
	{Name: "resource_scrape_error", Help: "1 if there was an error while getting container metrics, 0 otherwise", Type: metrics.Gauge},
	{Name: "prober_probe_total", Help: "Cumulative number of a liveness, readiness or startup probe for a container by result.", Type: metrics.Counter, Labels: []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}},
	{Name: "prober_probe_duration_seconds", Help: "Duration in seconds for a probe response.", Type: metrics.Histogram, Labels: []string{"probe_type", "container", "pod", "namespace"}},
	{Name: "podvisor_container_restarts_total", Help: "Restarts of each container of the pods on the device: its status' restartCount.", Type: metrics.Counter, Labels: []string{"namespace", "pod", "container"}},
	{Name: "podvisor_pressure_avg10_ratio", Help: "The share of the last 10 seconds in which some tasks stalled on the resource (PSI some avg10, 0 to 1).", Type: metrics.Gauge, Labels: []string{"resource"}},
	{Name: "podvisor_pressure_stalled_seconds_total", Help: "Time in seconds some (kind=some) or all (kind=full) non-idle tasks stalled on the resource (PSI total).", Type: metrics.Counter, Labels: []string{"resource", "kind"}},
	{Name: "podvisor_hub_connected", Help: "1 while the device is connected to its hub's broker, else 0.", Type: metrics.Gauge},
	{Name: "podvisor_outbox_items", Help: "Status items and events waiting for the hub's receipt.", Type: metrics.Gauge},
	{Name: "podvisor_outbox_oldest_unacked_seconds", Help: "How long the oldest item in the outbox has waited for the hub's receipt (0: empty).", Type: metrics.Gauge},
	{Name: "podvisor_build_info", Help: "podvisor's version and the Go version it was built with; always 1.", Type: metrics.Gauge, Labels: []string{"version", "goversion"}},
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
