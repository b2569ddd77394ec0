package supervisor

import (
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// capSysResource is the capability needed to lower oom_score_adj.
const capSysResource = 24

// hasCapability reports whether this process has an effective capability.
func hasCapability(bit uint) bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<bit) != 0
		}
	}
	return false
}

// setupCgroups detects the hierarchy and creates the QoS tiers and the
// cgroup shims live in (so no shim is charged to a container).
func (d *Daemon) setupCgroups() error {
	if !hasCapability(capSysResource) && os.Geteuid() == 0 {
		d.log.Warn("without CAP_SYS_RESOURCE, negative oom_score_adj (Guaranteed pods: -997) cannot be set; those containers keep the daemon's score")
	}
	d.cgroups.Mount = d.cfg.CgroupMount
	if d.cfg.CgroupRoot == "" {
		d.log.Warn("running without cgroups: resource limits are not enforced")
		return nil
	}
	if d.cfg.CgroupDriver == "systemd" {
		return d.setupSystemdCgroups()
	}
	d.cgroups.Layout = cgroups.Layout{Root: d.cfg.CgroupRoot}
	d.cgroups.Shims = path.Join(d.cfg.CgroupRoot, "shims")
	drv, err := cgroups.Detect(d.cfg.CgroupMount)
	if err == nil {
		for _, p := range append(d.cgroups.Layout.Tiers(), d.cgroups.Shims) {
			if err = drv.Ensure(p, resources.Limits{}); err != nil {
				break
			}
		}
	}
	if err != nil {
		if os.Geteuid() != 0 {
			// A developer trying podvisor unprivileged (make demo): run,
			// but say plainly that nothing is enforced.
			d.log.Warn("running unprivileged without cgroups: resource limits, OOM kill detection and stats are off", "err", err)
			return nil
		}
		return fmt.Errorf("cgroups: %w (set cgroups.root to \"\" to run without them)", err)
	}
	d.cgroups.Driver = drv
	d.log.Info("cgroups ready", "version", drv.Version(), "root", d.cfg.CgroupRoot)
	return nil
}

// setupSystemdCgroups makes the tiers as systemd slices; shims live in
// podvisor's own (delegated) service cgroup.
func (d *Daemon) setupSystemdCgroups() error {
	drv, err := cgroups.NewSystemd(d.cfg.CgroupMount)
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if d.cgroups.Shims, err = drv.ShimCgroup(); err != nil {
		drv.Close()
		return fmt.Errorf("cgroups: %w", err)
	}
	d.cgroups.Layout = cgroups.Layout{Root: d.cfg.CgroupRoot, Systemd: true}
	for _, p := range d.cgroups.Layout.Tiers() {
		if err := drv.Ensure(p, resources.Limits{}); err != nil {
			drv.Close()
			return fmt.Errorf("cgroups: %w", err)
		}
	}
	d.cgroups.Driver = drv
	d.log.Info("cgroups ready", "version", drv.Version(), "driver", "systemd", "root", d.cgroups.Layout.Tiers()[0], "shims", d.cgroups.Shims)
	return nil
}

func (d *Daemon) podCgroup(pod *v1.Pod) string {
	return d.cgroups.Layout.Pod(lifecycle.QOSClass(pod), pod.UID)
}

func (d *Daemon) containerCgroup(pod *v1.Pod, container string) string {
	return d.cgroups.Layout.Container(d.podCgroup(pod), pod.UID, container)
}

// instanceCgroup is the cgroup of one container instance, as its runtime
// places it.
func (d *Daemon) instanceCgroup(pod *v1.Pod, container, instanceID string) string {
	if rt := d.runtimes.Of(pod); rt != nil {
		return rt.InstanceCgroup(pod, container, instanceID)
	}
	return d.containerCgroup(pod, container)
}

// instanceCgroupFor creates the pod's cgroup (once per instance) with the
// kubelet's limits and returns the cgroup rt puts a container instance
// in. The container's OOM-kill counter is noted, so an exit is judged by
// the kills since this start.
func (d *Daemon) instanceCgroupFor(rt runtime.Runtime, pod *v1.Pod, container, instanceID string) (string, error) {
	drv := d.cgroups.Driver
	if drv == nil {
		return "", nil
	}
	if !d.podCgroups[pod.UID] {
		if err := drv.Ensure(d.podCgroup(pod), resources.PodLimits(pod, 0)); err != nil {
			return "", err
		}
		d.podCgroups[pod.UID] = true
	}
	d.listen.watch(pod) // before the container starts: its listen() is seen
	d.net.watch(pod)    // and its first packet counted
	path := rt.InstanceCgroup(pod, container, instanceID)
	d.oomBase[path], _ = drv.OOMKills(d.oomCounter(pod, path))
	return path, nil
}

// killCgroup kills every process of a container, wherever it forked to.
func (d *Daemon) killCgroup(in *lifecycle.Instance, container, instanceID string) {
	if d.cgroups.Driver == nil || in == nil {
		return
	}
	if err := d.cgroups.Driver.Kill(d.instanceCgroup(in.Pod, container, instanceID)); err != nil {
		d.log.Warn("cgroup kill", "pod", in.Key(), "container", container, "err", err)
	}
}

// oomKilled reports whether the kernel OOM-killed in the container's
// cgroup since it started.
func (d *Daemon) oomKilled(in *lifecycle.Instance, container, instanceID string) bool {
	if d.cgroups.Driver == nil || in == nil {
		return false
	}
	path := d.instanceCgroup(in.Pod, container, instanceID)
	n, err := d.cgroups.Driver.OOMKills(d.oomCounter(in.Pod, path))
	return err == nil && n > d.oomBase[path]
}

// oomCounter is the cgroup whose OOM-kill count judges a container: its
// own, or with the systemd driver its pod's slice. The shim reads the
// scope's own count when the container dies, but systemd may remove the
// scope first; the slice stays, and counts its scopes' kills too (v2
// memory.events is hierarchical). Of a pod's containers, the one that dies
// of SIGKILL after a kill is taken for the victim.
func (d *Daemon) oomCounter(pod *v1.Pod, path string) string {
	if d.podCountsOOM() {
		return d.podCgroup(pod)
	}
	return path
}

// podCountsOOM: containers are judged by their pod's OOM-kill counter.
func (d *Daemon) podCountsOOM() bool {
	_, scopes := d.cgroups.Driver.(cgroups.Placer)
	return scopes
}

// oomJudged settles a pod's OOM kills so far on the container just judged
// OOMKilled: with a counter shared by the pod (systemd), the next of its
// containers to die of SIGKILL is not taken for a victim of the same kill.
func (d *Daemon) oomJudged(in *lifecycle.Instance) {
	if d.cgroups.Driver == nil || in == nil || !d.podCountsOOM() {
		return // each container has its own counter
	}
	pod := d.podCgroup(in.Pod)
	n, err := d.cgroups.Driver.OOMKills(pod)
	if err != nil {
		return
	}
	for path, base := range d.oomBase {
		if strings.HasPrefix(path, pod+"/") && base < n {
			d.oomBase[path] = n
		}
	}
}

// removeCgroups deletes a pod's cgroups, containers first, wherever its
// QoS class put them.
func (d *Daemon) removeCgroups(uid types.UID) {
	d.net.unwatch(uid) // before the listen watcher removes the cgroup2 mirror
	d.listen.unwatch(uid)
	if d.cgroups.Driver == nil {
		return
	}
	delete(d.podCgroups, uid)
	pods := d.cgroups.Layout.Pods(uid)
	for path := range d.oomBase {
		for _, p := range pods {
			if strings.HasPrefix(path, p+"/") {
				delete(d.oomBase, path) // else every pod ever run leaves an entry
			}
		}
	}
	for _, p := range pods {
		if err := d.cgroups.Driver.Remove(p); err != nil {
			d.log.Warn("removing pod cgroup", "cgroup", p, "err", err)
		}
	}
}
