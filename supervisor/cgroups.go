package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/resources"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
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
	if d.cfg.CgroupRoot == "" {
		d.log.Warn("running without cgroups: resource limits are not enforced")
		return nil
	}
	drv, err := cgroups.Detect(d.cfg.CgroupMount)
	if err == nil {
		for _, p := range append(cgroups.QoSPaths(d.cfg.CgroupRoot), d.shimCgroup()) {
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
	d.cg = drv
	d.log.Info("cgroups ready", "version", drv.Version(), "root", d.cfg.CgroupRoot)
	return nil
}

func (d *Daemon) shimCgroup() string { return filepath.Join(d.cfg.CgroupRoot, "shims") }

func (d *Daemon) podCgroup(pod *v1.Pod) string {
	return cgroups.PodPath(d.cfg.CgroupRoot, lifecycle.QOSClass(pod), pod.UID)
}

func (d *Daemon) containerCgroup(pod *v1.Pod, container string) string {
	return filepath.Join(d.podCgroup(pod), container)
}

// placeContainer creates the pod's (once per instance) and the
// container's cgroups with the kubelet's limits and tells the shim where
// the container goes. The container's OOM-kill counter is noted, so an
// exit is judged by the kills since this start.
func (d *Daemon) placeContainer(pod *v1.Pod, c *v1.Container, s *shim.Spec) error {
	score := resources.OOMScoreAdj(pod, c, d.memory)
	s.OOMScoreAdj = &score
	if d.cg == nil {
		return nil
	}
	if !d.podCgroups[pod.UID] {
		if err := d.cg.Ensure(d.podCgroup(pod), resources.PodLimits(pod, 0)); err != nil {
			return err
		}
		d.podCgroups[pod.UID] = true
	}
	path := d.containerCgroup(pod, c.Name)
	if err := d.cg.Ensure(path, resources.ContainerLimits(c)); err != nil {
		return err
	}
	d.oomBase[path], _ = d.cg.OOMKills(path)
	p := d.cg.Placement(path)
	s.Cgroup = shim.Cgroup{Dir: p.Dir, Procs: p.Procs}
	if len(p.Procs) > 0 {
		s.Cgroup.Return = d.cg.Placement(d.shimCgroup()).Procs
	}
	return nil
}

// killCgroup kills every process of a container, wherever it forked to.
func (d *Daemon) killCgroup(in *lifecycle.Instance, container string) {
	if d.cg == nil || in == nil {
		return
	}
	if err := d.cg.Kill(d.containerCgroup(in.Pod, container)); err != nil {
		d.log.Warn("cgroup kill", "pod", in.Key(), "container", container, "err", err)
	}
}

// oomKilled reports whether the kernel OOM-killed in the container's
// cgroup.
func (d *Daemon) oomKilled(in *lifecycle.Instance, container string) bool {
	if d.cg == nil || in == nil {
		return false
	}
	path := d.containerCgroup(in.Pod, container)
	n, err := d.cg.OOMKills(path)
	return err == nil && n > d.oomBase[path]
}

// removeCgroups deletes a pod's cgroups, containers first, wherever its
// QoS class put them.
func (d *Daemon) removeCgroups(uid types.UID) {
	if d.cg == nil {
		return
	}
	delete(d.podCgroups, uid)
	for path := range d.oomBase {
		if strings.Contains(path, "/pod"+string(uid)+"/") {
			delete(d.oomBase, path) // else every pod ever run leaves an entry
		}
	}
	for _, p := range cgroups.PodPaths(d.cfg.CgroupRoot, uid) {
		if err := d.cg.Remove(p); err != nil {
			d.log.Warn("removing pod cgroup", "cgroup", p, "err", err)
		}
	}
}
