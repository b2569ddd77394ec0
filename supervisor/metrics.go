package supervisor

import (
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/devmetrics"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// Metrics is the recorder the loop feeds: what the metrics listener and
// the hub heartbeat's summary read (devmetrics.Collector).
func (d *Daemon) Metrics() *devmetrics.Recorder { return d.metrics }

// observeMetrics hands the recorder the pods just published and where the
// running ones' usage is read. The loop calls it after a step that
// changed a pod: only a status change starts or ends a container.
func (d *Daemon) observeMetrics(now time.Time) {
	pods, _, _ := d.view.Pods()
	var targets []devmetrics.PodTarget
	var stats devmetrics.StatsReader
	if d.cgroups.Driver != nil {
		stats = d.cgroups.Driver
		for _, in := range d.machine.Instances() {
			if !in.Live() {
				continue
			}
			t := devmetrics.PodTarget{UID: in.UID(), Namespace: in.Pod.Namespace, Name: in.Pod.Name, Cgroup: d.cgroups.PodCgroup(in.Pod)}
			rt := d.runtimes.Of(in.Pod)
			for _, c := range in.AllContainers() {
				if c.Phase != lifecycle.Running {
					continue
				}
				t.Containers = append(t.Containers, devmetrics.ContainerTarget{Name: c.Name,
					Cgroup: d.cgroups.InstanceCgroup(rt, in.Pod, c.Name, c.InstanceID), StartedAt: c.StartedAt})
			}
			targets = append(targets, t)
		}
	}
	d.metrics.Observe(pods, targets, stats, now)
}

// containerStarting counts a start attempt of the action's container.
func (d *Daemon) containerStarting(in *lifecycle.Instance, a lifecycle.Action) {
	d.metrics.ContainerStarting(in.UID(), devmetrics.ContainerTypeOf(in.Pod, a.Container))
}

// startFailed counts a failed start by the kubelet's code for it.
func (d *Daemon) startFailed(uid types.UID, container, code string) {
	if in := d.machine.Instance(uid); in != nil {
		d.metrics.ContainerStartFailed(devmetrics.ContainerTypeOf(in.Pod, container), code)
	}
}
