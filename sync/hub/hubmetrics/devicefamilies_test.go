package hubmetrics

import "github.com/podvisor/podvisor/metrics"

// deviceFamilies are the device's /metrics families as docs/metrics.md
// and the design of issue 28 name them (the kubelet's names and labels
// where the kubelet has the metric, podvisor_ for podvisor's own): what
// packaging/grafana/podvisor-device.json may query. The device's
// exposition is written in its own package (the devmetrics work); when
// it keeps such a table of its own, this one should become a read of
// it. Help texts are not checked here.
var deviceFamilies = []Family{
	{Name: "kubelet_running_pods", Type: metrics.Gauge},
	{Name: "kubelet_running_containers", Type: metrics.Gauge, Labels: []string{"container_state"}},
	{Name: "kubelet_pod_start_duration_seconds", Type: metrics.Histogram},
	{Name: "kubelet_evictions", Type: metrics.Counter, Labels: []string{"eviction_signal"}},
	{Name: "kubelet_preemptions", Type: metrics.Counter, Labels: []string{"preemption_signal"}},
	{Name: "kubelet_started_containers_errors_total", Type: metrics.Counter, Labels: []string{"code", "container_type"}},
	{Name: "kubelet_started_containers_total", Type: metrics.Counter, Labels: []string{"container_type"}},
	{Name: "kubelet_started_pods_total", Type: metrics.Counter},
	{Name: "prober_probe_total", Type: metrics.Counter, Labels: []string{"probe_type", "result", "container", "pod", "namespace", "pod_uid"}},
	{Name: "prober_probe_duration_seconds", Type: metrics.Histogram, Labels: []string{"probe_type", "container", "pod", "namespace"}},
	{Name: "container_cpu_usage_seconds_total", Type: metrics.Counter, Labels: []string{"container", "pod", "namespace"}},
	{Name: "container_memory_working_set_bytes", Type: metrics.Gauge, Labels: []string{"container", "pod", "namespace"}},
	{Name: "container_start_time_seconds", Type: metrics.Gauge, Labels: []string{"container", "pod", "namespace"}},
	{Name: "pod_cpu_usage_seconds_total", Type: metrics.Counter, Labels: []string{"pod", "namespace"}},
	{Name: "pod_memory_working_set_bytes", Type: metrics.Gauge, Labels: []string{"pod", "namespace"}},
	{Name: "node_cpu_usage_seconds_total", Type: metrics.Counter},
	{Name: "node_memory_working_set_bytes", Type: metrics.Gauge},
	{Name: "podvisor_container_restarts_total", Type: metrics.Counter, Labels: []string{"namespace", "pod", "container"}},
	{Name: "podvisor_pressure_avg10_ratio", Type: metrics.Gauge, Labels: []string{"resource"}},
	{Name: "podvisor_pressure_stalled_seconds_total", Type: metrics.Counter, Labels: []string{"resource", "kind"}},
	{Name: "podvisor_outbox_items", Type: metrics.Gauge},
	{Name: "podvisor_outbox_oldest_unacked_seconds", Type: metrics.Gauge},
	{Name: "podvisor_hub_connected", Type: metrics.Gauge},
	{Name: "podvisor_build_info", Type: metrics.Gauge, Labels: []string{"version", "goversion"}},
}
