// Package podcgroups is the daemon's side of pods' cgroups: it sets up
// the hierarchy (QoS tiers and the shims' cgroup), makes each pod's
// cgroup with the kubelet's limits before its first container starts,
// kills and removes them, and judges from the kernel's OOM-kill counters
// whether a container that died of SIGKILL was OOM-killed.
package podcgroups

import (
	"fmt"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Options are the cgroups settings of the device.
type Options struct {
	// Root is where pods' cgroups go ("" runs without cgroups); Mount is
	// the hierarchy's mount point.
	Root  string
	Mount string
	// Driver is "cgroupfs" (default) or "systemd": slices and scopes
	// made through systemd.
	Driver string
	Log    *slog.Logger
}

// Manager holds the pods' cgroups of one daemon. It is used from the
// daemon's loop only.
type Manager struct {
	// Cgroups is the hierarchy as Setup found it (Driver nil without
	// cgroups), which the runtimes are given. The listen watcher and the
	// network counters may set its Unified before the runtimes are made.
	runtime.Cgroups
	opts Options
	log  *slog.Logger
	// podsMade are the pod cgroups made by this daemon; oomBase the OOM
	// kill counts of container cgroups when their instance started.
	podsMade map[types.UID]bool
	oomBase  map[string]uint64
}

// New returns a manager without cgroups until Setup.
func New(o Options) *Manager {
	return &Manager{opts: o, log: o.Log, podsMade: map[types.UID]bool{}, oomBase: map[string]uint64{}}
}

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

// Setup detects the hierarchy and creates the QoS tiers and the cgroup
// shims live in (so no shim is charged to a container).
func (m *Manager) Setup() error {
	if !hasCapability(capSysResource) && os.Geteuid() == 0 {
		m.log.Warn("without CAP_SYS_RESOURCE, negative oom_score_adj (Guaranteed pods: -997) cannot be set; those containers keep the daemon's score")
	}
	m.Mount = m.opts.Mount
	if m.opts.Root == "" {
		m.log.Warn("running without cgroups: resource limits are not enforced")
		return nil
	}
	if m.opts.Driver == "systemd" {
		return m.setupSystemd()
	}
	m.Layout = cgroups.Layout{Root: m.opts.Root}
	m.Shims = path.Join(m.opts.Root, "shims")
	drv, err := cgroups.Detect(m.opts.Mount)
	if err == nil {
		for _, p := range append(m.Layout.Tiers(), m.Shims) {
			if err = drv.Ensure(p, resources.Limits{}); err != nil {
				break
			}
		}
	}
	if err != nil {
		if os.Geteuid() != 0 {
			// A developer trying podvisor unprivileged (make demo): run,
			// but say plainly that nothing is enforced.
			m.log.Warn("running unprivileged without cgroups: resource limits, OOM kill detection and stats are off", "err", err)
			return nil
		}
		return fmt.Errorf("cgroups: %w (set cgroups.root to \"\" to run without them)", err)
	}
	m.Driver = drv
	m.log.Info("cgroups ready", "version", drv.Version(), "root", m.opts.Root)
	return nil
}

// setupSystemd makes the tiers as systemd slices; shims live in
// podvisor's own (delegated) service cgroup.
func (m *Manager) setupSystemd() error {
	drv, err := cgroups.NewSystemd(m.opts.Mount)
	if err != nil {
		return fmt.Errorf("cgroups: %w", err)
	}
	if m.Shims, err = drv.ShimCgroup(); err != nil {
		drv.Close()
		return fmt.Errorf("cgroups: %w", err)
	}
	m.Layout = cgroups.Layout{Root: m.opts.Root, Systemd: true}
	for _, p := range m.Layout.Tiers() {
		if err := drv.Ensure(p, resources.Limits{}); err != nil {
			drv.Close()
			return fmt.Errorf("cgroups: %w", err)
		}
	}
	m.Driver = drv
	m.log.Info("cgroups ready", "version", drv.Version(), "driver", "systemd", "root", m.Layout.Tiers()[0], "shims", m.Shims)
	return nil
}

// PodCgroup is a pod's cgroup. It is the manager's, not only its
// Cgroups': a method value of it reads the layout when called, not a copy
// made when the value was taken.
func (m *Manager) PodCgroup(pod *v1.Pod) string {
	return m.Cgroups.PodCgroup(pod)
}

func (m *Manager) containerCgroup(pod *v1.Pod, container string) string {
	return m.Layout.Container(m.PodCgroup(pod), pod.UID, container)
}

// InstanceCgroup is the cgroup of one container instance, as the pod's
// runtime rt places it (nil: a pod whose runtime is missing, placed as
// the layout says).
func (m *Manager) InstanceCgroup(rt runtime.Runtime, pod *v1.Pod, container, instanceID string) string {
	if rt != nil {
		return rt.InstanceCgroup(pod, container, instanceID)
	}
	return m.containerCgroup(pod, container)
}

// EnsurePod creates the pod's cgroup with the kubelet's limits, once per
// pod instance. Without cgroups it does nothing.
func (m *Manager) EnsurePod(pod *v1.Pod) error {
	if m.Driver == nil || m.podsMade[pod.UID] {
		return nil
	}
	if err := m.Driver.Ensure(m.PodCgroup(pod), resources.PodLimits(pod, 0)); err != nil {
		return err
	}
	m.podsMade[pod.UID] = true
	return nil
}

// InstanceStarting returns the cgroup rt puts a container instance in
// ("" without cgroups), once its pod's is made (EnsurePod). The
// container's OOM-kill counter is noted, so an exit is judged by the
// kills since this start.
func (m *Manager) InstanceStarting(rt runtime.Runtime, pod *v1.Pod, container, instanceID string) string {
	if m.Driver == nil {
		return ""
	}
	path := rt.InstanceCgroup(pod, container, instanceID)
	m.oomBase[path], _ = m.Driver.OOMKills(m.oomCounter(pod, path))
	return path
}

// Killer kills every process of a container, wherever it forked to,
// when called; rt is the pod's runtime (nil: none). The cgroup is named
// now, the kill may run later on any goroutine: on cgroup v1 it freezes
// the cgroup first, which waits for each of its tasks to stop, and the
// daemon's loop does not wait for that. Without cgroups it does nothing.
func (m *Manager) Killer(rt runtime.Runtime, pod *v1.Pod, container, instanceID string) func() {
	if m.Driver == nil || pod == nil {
		return func() {}
	}
	path, driver, log := m.InstanceCgroup(rt, pod, container, instanceID), m.Driver, m.log
	name := pod.Namespace + "/" + pod.Name
	return func() {
		if err := driver.Kill(path); err != nil {
			log.Warn("cgroup kill", "pod", name, "container", container, "err", err)
		}
	}
}

// OOMKilled reports whether the kernel OOM-killed in the container's
// cgroup since it started; rt is the pod's runtime (nil: none).
func (m *Manager) OOMKilled(rt runtime.Runtime, pod *v1.Pod, container, instanceID string) bool {
	if m.Driver == nil || pod == nil {
		return false
	}
	path := m.InstanceCgroup(rt, pod, container, instanceID)
	n, err := m.Driver.OOMKills(m.oomCounter(pod, path))
	return err == nil && n > m.oomBase[path]
}

// oomCounter is the cgroup whose OOM-kill count judges a container: its
// own, or with the systemd driver its pod's slice. The shim reads the
// scope's own count when the container dies, but systemd may remove the
// scope first; the slice stays, and counts its scopes' kills too (v2
// memory.events is hierarchical). Of a pod's containers, the one that dies
// of SIGKILL after a kill is taken for the victim.
func (m *Manager) oomCounter(pod *v1.Pod, path string) string {
	if m.podCountsOOM() {
		return m.PodCgroup(pod)
	}
	return path
}

// podCountsOOM: containers are judged by their pod's OOM-kill counter.
func (m *Manager) podCountsOOM() bool {
	_, scopes := m.Driver.(cgroups.Placer)
	return scopes
}

// OOMJudged settles a pod's OOM kills so far on the container just judged
// OOMKilled: with a counter shared by the pod (systemd), the next of its
// containers to die of SIGKILL is not taken for a victim of the same kill.
func (m *Manager) OOMJudged(pod *v1.Pod) {
	if m.Driver == nil || pod == nil || !m.podCountsOOM() {
		return // each container has its own counter
	}
	cgroup := m.PodCgroup(pod)
	n, err := m.Driver.OOMKills(cgroup)
	if err != nil {
		return
	}
	for path, base := range m.oomBase {
		if strings.HasPrefix(path, cgroup+"/") && base < n {
			m.oomBase[path] = n
		}
	}
}

// RemovePod deletes a pod's cgroups, containers first, wherever its QoS
// class put them.
func (m *Manager) RemovePod(uid types.UID) {
	if m.Driver == nil {
		return
	}
	delete(m.podsMade, uid)
	pods := m.Layout.Pods(uid)
	for path := range m.oomBase {
		for _, p := range pods {
			if strings.HasPrefix(path, p+"/") {
				delete(m.oomBase, path) // else every pod ever run leaves an entry
			}
		}
	}
	for _, p := range pods {
		if err := m.Driver.Remove(p); err != nil {
			m.log.Warn("removing pod cgroup", "cgroup", p, "err", err)
		}
	}
}
