package hubmetrics

import (
	"slices"

	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/sync/protocol"
)

// Family is one metric family the hub writes: the table the exposition
// is written from, and that the Grafana dashboards' test and the docs
// read, so a name cannot drift between them.
type Family = metrics.Family

// The hub's own families: the fleet as its database holds it, and what
// the device link counted since the hub started.
var (
	famDevices = &Family{Name: "podhub_devices", Help: "Devices by state: ready, not_ready (online but silent past the device timeout, or sharing its ID), offline (no presence), fenced (podhub fence device; whatever else it is).",
		Type: metrics.Gauge, Labels: []string{"state"}}
	famPods = &Family{Name: "podhub_pods", Help: "Pods by phase, as the Kubernetes API at the hub lists them: every device's mirror pods, and the hub's pods no device reports yet.",
		Type: metrics.Gauge, Labels: []string{"phase"}}
	famPendingAck = &Family{Name: "podhub_desired_pending_ack", Help: "Devices whose observed generation is below their desired document's generation.",
		Type: metrics.Gauge}
	famStatusItems = &Family{Name: "podhub_status_items_total", Help: "Status items (pod statuses and events) devices sent that the hub stored, since it started.",
		Type: metrics.Counter}
	famHeartbeats = &Family{Name: "podhub_heartbeats_total", Help: "Heartbeats devices sent that the hub stored, since it started.",
		Type: metrics.Counter}
	famRefused = &Family{Name: "podhub_refused_messages_total", Help: "Messages devices sent that the hub refused, since it started, by the kind of their topic.",
		Type: metrics.Counter, Labels: []string{"kind"}}
	famNotOwned = &Family{Name: "podhub_messages_not_owned_total", Help: "Messages devices sent that this replica left to the replica owning their device (replicas on PostgreSQL), since it started, by the kind of their topic.",
		Type: metrics.Counter, Labels: []string{"kind"}}
	famWorkloadReplicas = &Family{Name: "podhub_workload_replicas", Help: "Replicas of each Deployment, DaemonSet and StatefulSet by state, as its controller last stored its status: desired, updated, ready, available.",
		Type: metrics.Gauge, Labels: []string{"kind", "namespace", "name", "state"}}
	famUpdateDevices = &Family{Name: "podhub_update_devices", Help: "Devices of each unfinished self or firmware update by their state in it (Waiting, Offline, Ordered, Done, Failed, or the phase the device reports).",
		Type: metrics.Gauge, Labels: []string{"update", "state"}}
	famBuildInfo = &Family{Name: "podhub_build_info", Help: "The hub's version and the Go version it was built with; always 1.",
		Type: metrics.Gauge, Labels: []string{"version", "goversion"}}
)

// The families of each device: a few from the fleet database, the rest
// its newest heartbeat's metrics snapshot, one family per snapshot field.
var (
	famDeviceInfo = &Family{Name: "podhub_device_info", Help: "Each device the hub knows, with the version it runs; always 1.",
		Type: metrics.Gauge, Labels: []string{"device", "version"}}
	famDeviceReady = &Family{Name: "podhub_device_ready", Help: "Whether the device is Ready (online, heard from within the device timeout, its ID its own): 1 or 0.",
		Type: metrics.Gauge, Labels: []string{"device"}}
	famDeviceLastSeen = &Family{Name: "podhub_device_last_seen_timestamp_seconds", Help: "When the hub last heard from the device, in Unix seconds on the hub's clock.",
		Type: metrics.Gauge, Labels: []string{"device"}}
)

// snapshotFamily is one family re-exported from the devices' metrics
// snapshots: values gives its samples for one snapshot (label value,
// value; the label is Family.Labels[1] when there is one).
type snapshotFamily struct {
	*Family
	values func(*protocol.MetricsSnapshot) []labelled
}

type labelled struct {
	label string
	value float64
}

// one is a family with a sample for every snapshot.
func one(get func(*protocol.MetricsSnapshot) float64) func(*protocol.MetricsSnapshot) []labelled {
	return func(s *protocol.MetricsSnapshot) []labelled { return []labelled{{"", get(s)}} }
}

// known is a family of a field the snapshot omits when it is zero (the
// device does not know it): no sample then.
func known(get func(*protocol.MetricsSnapshot) uint64) func(*protocol.MetricsSnapshot) []labelled {
	return func(s *protocol.MetricsSnapshot) []labelled {
		if v := get(s); v != 0 {
			return []labelled{{"", float64(v)}}
		}
		return nil
	}
}

func device(name, help string, typ metrics.Type, values func(*protocol.MetricsSnapshot) []labelled, extra ...string) snapshotFamily {
	return snapshotFamily{&Family{Name: name, Help: help, Type: typ, Labels: append([]string{"device"}, extra...)}, values}
}

// snapshotFamilies are the snapshot's fields as series with a device
// label, for Ready devices; the device's own series they sum up are
// named in their help.
var snapshotFamilies = []snapshotFamily{
	device("podhub_device_start_time_seconds", "When the device's daemon started, in Unix seconds on the device's clock: its counters count from then.",
		metrics.Gauge, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.Since) })),
	device("podhub_device_running_pods", "The device's kubelet_running_pods.",
		metrics.Gauge, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.RunningPods) })),
	device("podhub_device_running_containers", `The device's kubelet_running_containers{container_state="running"}.`,
		metrics.Gauge, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.RunningContainers) })),
	device("podhub_device_evictions_total", "The device's kubelet_evictions, every eviction signal summed.",
		metrics.Counter, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.Evictions) })),
	device("podhub_device_preemptions_total", "The device's kubelet_preemptions, every preemption signal summed.",
		metrics.Counter, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.Preemptions) })),
	device("podhub_device_started_containers_errors_total", "The device's kubelet_started_containers_errors_total, summed.",
		metrics.Counter, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.StartedContainersErrors) })),
	device("podhub_device_container_restarts_total", "The device's podvisor_container_restarts_total, summed.",
		metrics.Counter, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.ContainerRestarts) })),
	device("podhub_device_probe_failures_total", `The device's prober_probe_total{result="failed"}, summed.`,
		metrics.Counter, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.ProbeFailures) })),
	device("podhub_device_pods_cpu_usage_seconds_total", "The device's pod_cpu_usage_seconds_total, every pod summed.",
		metrics.Counter, one(func(s *protocol.MetricsSnapshot) float64 { return s.PodsCPUSeconds })),
	device("podhub_device_pods_memory_working_set_bytes", "The device's pod_memory_working_set_bytes, every pod summed.",
		metrics.Gauge, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.PodsMemoryWorkingSet) })),
	device("podhub_device_node_memory_working_set_bytes", "The device's node_memory_working_set_bytes (no sample when the device does not report it).",
		metrics.Gauge, known(func(s *protocol.MetricsSnapshot) uint64 { return s.NodeMemoryWorkingSet })),
	device("podhub_device_node_memory_available_bytes", "The device's memory.available eviction signal, in bytes (no sample when the device does not report it).",
		metrics.Gauge, known(func(s *protocol.MetricsSnapshot) uint64 { return s.NodeMemoryAvailable })),
	device("podhub_device_node_fs_available_bytes", "The device's nodefs.available eviction signal, in bytes (no sample when the device does not report it).",
		metrics.Gauge, known(func(s *protocol.MetricsSnapshot) uint64 { return s.NodeFsAvailable })),
	device("podhub_device_pressure_avg10_ratio", `The device's podvisor_pressure_avg10_ratio: PSI's "some" avg10 of cpu, memory and io, as a ratio (no sample on a kernel without PSI).`,
		metrics.Gauge, func(s *protocol.MetricsSnapshot) []labelled {
			if p := s.Pressure; p != nil {
				return []labelled{{"cpu", p.CPU / 100}, {"io", p.IO / 100}, {"memory", p.Memory / 100}}
			}
			return nil
		}, "resource"),
	device("podhub_device_outbox_items", "The device's podvisor_outbox_items: status items waiting for the hub's receipt.",
		metrics.Gauge, one(func(s *protocol.MetricsSnapshot) float64 { return float64(s.OutboxDepth) })),
	device("podhub_device_outbox_oldest_unacked_seconds", "The device's podvisor_outbox_oldest_unacked_seconds.",
		metrics.Gauge, one(func(s *protocol.MetricsSnapshot) float64 { return s.OutboxOldestSecs })),
}

// Families lists every family the hub writes, in the exposition's
// order.
func Families() []Family {
	out := []Family{}
	for _, f := range []*Family{famDevices, famPods, famPendingAck, famStatusItems, famHeartbeats, famRefused,
		famNotOwned, famWorkloadReplicas, famUpdateDevices, famBuildInfo, famDeviceInfo, famDeviceReady, famDeviceLastSeen} {
		out = append(out, *f)
	}
	for _, f := range snapshotFamilies {
		out = append(out, *f.Family)
	}
	for i := range out {
		out[i].Labels = slices.Clone(out[i].Labels)
	}
	return out
}
