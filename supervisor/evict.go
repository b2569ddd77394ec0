package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/pod/priority"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

// EvictionConfig holds the kubelet-style eviction settings.
type EvictionConfig struct {
	Hard, Soft, SoftGracePeriod, MinimumReclaim map[string]string
	MaxPodGracePeriod                           time.Duration
	PressureTransitionPeriod                    time.Duration
	// MonitorPeriod is the safety-net check behind the kernel's events.
	MonitorPeriod time.Duration
}

// evictor is the daemon's side of node-pressure eviction: it observes the
// signals when the kernel or the safety net says so, asks the eviction
// manager, and evicts one pod at a time.
type evictor struct {
	mgr       *eviction.Manager
	observer  pressure.Observer
	observe   func() map[eviction.Signal]eviction.Observation // nil: observer's
	notifier  *pressure.Notifier
	threshold *pressure.MemoryThreshold
	memLimit  int64 // hard memory.available threshold in bytes, for the eventfd
	recheck   *time.Timer
	pacer     eviction.Pacer
}

func (d *Daemon) setupEviction(ctx context.Context) error {
	c := d.cfg.Eviction
	ts, err := eviction.Parse(c.Hard, c.Soft, c.SoftGracePeriod, c.MinimumReclaim)
	if err != nil {
		return err
	}
	e := &evictor{
		mgr:      &eviction.Manager{Thresholds: ts, TransitionPeriod: c.PressureTransitionPeriod, MaxPodGracePeriod: c.MaxPodGracePeriod},
		observer: pressure.Observer{FsPath: d.cfg.DataDir, ImageFsPath: d.images.FS()},
		notifier: pressure.NewNotifier(d.log),
		recheck:  time.NewTimer(time.Hour),
	}
	e.recheck.Stop()
	if mem := cgroups.V1MemoryMount(); mem != "" {
		e.observer.MemoryCgroup = mem
		e.threshold = e.notifier.NewMemoryThreshold(mem)
	}
	for _, t := range ts {
		if t.Signal == eviction.MemoryAvailable && !t.Soft {
			e.memLimit = t.Quantity
			if t.Percentage > 0 {
				e.memLimit = int64(t.Percentage * float64(d.memory))
			}
		}
	}
	// A 2 s window: without CAP_SYS_RESOURCE (dropped in some sandboxes
	// even for root) kernels accept only multiples of 2 s.
	psi := []string{"/proc/pressure/memory"}
	if d.cgroups.Driver != nil && d.cgroups.Driver.Version() == 2 {
		// The pods' own pressure and memory events: pods stalling on
		// memory, hitting a limit or OOM-killed are looked at at once.
		pods := filepath.Join(d.cfg.CgroupMount, d.cgroups.Layout.Tiers()[0])
		psi = append(psi, filepath.Join(pods, "memory.pressure"))
		if err := e.notifier.Modified(ctx, filepath.Join(pods, "memory.events")); err != nil {
			d.log.Warn("no memory.events notification for the pods' cgroup", "err", err)
		}
	}
	err = e.notifier.PSI(ctx, 150*time.Millisecond, 2*time.Second, psi...)
	if err != nil && len(psi) > 1 {
		d.log.Warn("no PSI trigger on the pods' cgroup; using the system's alone", "err", err)
		err = e.notifier.PSI(ctx, 150*time.Millisecond, 2*time.Second, psi[0])
	}
	if err != nil {
		d.log.Warn("no PSI trigger; memory pressure is seen through thresholds and the periodic check", "err", err)
	}
	e.notifier.Every(ctx, c.MonitorPeriod)
	d.evict = e
	d.checkPressure(ctx, pressure.WakeStart)
	return nil
}

// wakePressure looks at the signals for what the notifier says woke it.
func (d *Daemon) wakePressure(ctx context.Context) {
	if why := d.evict.notifier.Take(); why != 0 {
		d.checkPressure(ctx, why)
	} // else an earlier look took this poke's cause and saw what it saw
}

// checkPressure observes the signals, updates the node conditions and
// evicts a pod if a threshold is met. why is what woke it: an eviction
// records it on the victim, so that an eviction the kernel's events
// brought at once can be told from one the safety net found late.
func (d *Daemon) checkPressure(ctx context.Context, why pressure.Wake) {
	e := d.evict
	now := d.now()
	observe := e.observe
	if observe == nil {
		observe = e.observer.Observe
	}
	obs := observe()
	d.images.Collect(obs)
	st := e.mgr.Synchronize(obs, now)
	d.pressure = st.Conditions
	if e.threshold != nil && e.memLimit > 0 {
		// Re-armed after every look: the kubelet's memcg notifier does
		// so too, since inactive file pages move the crossing point.
		if usage, inactive, err := pressure.RootUsage(e.observer.MemoryCgroup); err == nil {
			level := obs[eviction.MemoryAvailable].Capacity - e.memLimit + inactive
			if err := e.threshold.Set(ctx, max(level, usage+1)); err != nil {
				d.log.Warn("memory threshold notification unavailable", "err", err)
				e.threshold = nil
			}
		}
	}
	met := len(st.Met) > 0
	defer resetTimer(e.recheck, eviction.NextLook(st.NextCheck, now, met), now)
	live := func(uid types.UID) bool {
		in := d.machine.Instance(uid)
		return in != nil && in.Live()
	}
	if !e.pacer.Look(met, live) {
		return
	}
	victim, reclaim := e.mgr.Select(st.Met, d.podStats(), e.pacer.Reclaimed())
	switch e.pacer.Chose(victim, reclaim) {
	case eviction.TurnReclaim:
		d.log.Info("disk pressure: reclaiming finished containers, rotated logs and unused images first")
		d.gcDevice()
		d.removeRotatedLogs()
		d.images.PruneUnused()
	case eviction.TurnNoVictim:
		d.log.Warn("eviction threshold met but no pod can be evicted", "thresholds", st.Met)
	case eviction.TurnEvict:
		d.log.Warn("evicting pod", "pod", victim.Pod.Name, "grace", victim.GracePeriod, "why", victim.Message, "wokenBy", why.String())
		d.record(d.machine.Instance(victim.Pod.UID), "Warning", ReasonThresholdMet, thresholdsMet(st.Met, why))
		d.execute(d.machine.Evict(victim.Pod.UID, victim.Message, victim.GracePeriod, now))
	}
}

// ReasonThresholdMet is the event an eviction's victim gets before its
// Evicted: which thresholds were met and what made the daemon look. The
// kubelet gives its node an event of this reason.
const ReasonThresholdMet = "EvictionThresholdMet"

func thresholdsMet(met []eviction.Threshold, why pressure.Wake) string {
	names := make([]string, len(met))
	for i, t := range met {
		names[i] = t.String()
	}
	return fmt.Sprintf("eviction threshold met (%s); woken by the %s", strings.Join(names, ", "), why)
}

// podStats describes every running pod for eviction ranking.
func (d *Daemon) podStats() []eviction.PodStats {
	var out []eviction.PodStats
	for _, in := range d.machine.Instances() {
		if in.Failed != nil || in.Terminating || !in.Live() {
			continue
		}
		p := in.Pod
		prio := lifecycle.PriorityOf(p)
		req := resources.PodRequests(p)
		ps := eviction.PodStats{
			UID: p.UID, Name: in.Key(), Priority: prio, Critical: priority.IsCritical(prio),
			MemoryReq: req.Memory().Value(), DiskReq: req.StorageEphemeral().Value(),
		}
		if g := p.Spec.TerminationGracePeriodSeconds; g != nil {
			ps.GracePeriod = time.Duration(*g) * time.Second
		}
		if d.cgroups.Driver != nil {
			if s, err := d.cgroups.Driver.Stats(d.podCgroup(p)); err == nil {
				ps.MemoryUsage, ps.Processes = int64(s.MemoryWorkingSet), int64(s.Pids)
			}
		}
		// A process pod's own disk use is its logs.
		ps.DiskUsage = dirSize(d.podLogDir(p))
		out = append(out, ps)
	}
	return out
}

// removeRotatedLogs deletes every rotated log file (name.log.N). Shims only
// write the current file, so this is safe under running containers.
func (d *Daemon) removeRotatedLogs() {
	rotated, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "logs", "*", "*", "*.log.[0-9]*"))
	for _, f := range rotated {
		if err := os.Remove(f); err != nil {
			d.log.Warn("removing rotated log", "file", f, "err", err)
		}
	}
	if len(rotated) > 0 {
		d.log.Info("removed rotated logs under disk pressure", "files", len(rotated))
	}
}

// dirSize adds up the sizes of the files below dir.
func dirSize(dir string) int64 {
	var total int64
	filepath.WalkDir(dir, func(_ string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			if info, err := e.Info(); err == nil {
				total += info.Size()
			}
		}
		return nil
	})
	return total
}
