package supervisor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/podcgroups"
	"github.com/podvisor/podvisor/supervisor/pressure"
	"github.com/podvisor/podvisor/supervisor/retention"
)

// newProtector reads the device's memory and prepares pressure eviction,
// drain, the node's status (reporting version) and what the downward API
// tells of the node.
func newProtector(c *config.Config, version, hostIP string, usage func(*v1.Pod) nodeprotect.Usage,
	observed func(map[eviction.Signal]eviction.Observation), now func() time.Time, log *slog.Logger) (*nodeprotect.Protector, error) {
	return nodeprotect.New(nodeprotect.Options{
		Log: log, Now: now, DataDir: c.DataDir,
		MemoryCgroup: cgroups.V1MemoryMount(), Memory: pressure.MemTotal(),
		NodeName: c.NodeName, HostIP: hostIP, Node: nodeConfig(c, version),
		Eviction: evictionConfig(c), ShutdownBuckets: ShutdownBuckets(c),
		Usage: usage, Observed: observed,
	})
}

// watchPressure arms the kernel's pressure notifications and takes the
// first look at the signals.
func (d *Daemon) watchPressure(ctx context.Context) {
	var pods string
	if d.cgroups.Driver != nil && d.cgroups.Driver.Version() == 2 {
		pods = filepath.Join(d.cfg.Cgroups.Mount, d.cgroups.Layout.Tiers()[0])
	}
	d.protector.Watch(ctx, pods)
	d.protectNode(d.protector.Look(ctx, pressure.WakeStart, d.machine))
}

// protectNode carries out what a look at the signals decided.
func (d *Daemon) protectNode(dec nodeprotect.Decision) {
	if dec.Reclaim {
		d.retention.TrimDevice(d.runtimes, d.machine)
		removeRotatedLogs(d.cfg.DataDir, d.log)
		d.runtimes.Images().PruneUnused()
	}
	if e := dec.Evict; e != nil {
		d.record(d.machine.Instance(e.Pod), "Warning", nodeprotect.ReasonThresholdMet, e.Event)
		d.metrics.Evicted(string(e.Signal))
		d.execute(d.machine.Evict(e.Pod, e.Message, e.GracePeriod, e.At))
	}
}

// stopDrained stops the pods a drain's bucket takes.
func (d *Daemon) stopDrained(stops []nodeprotect.Stop) {
	for _, s := range stops {
		d.execute(d.machine.Fail(s.Pod, s.Reason, s.Message, s.GracePeriod, s.At))
	}
}

// podUsage says what a running pod uses, for eviction ranking: its
// cgroups' memory and processes, and its logs.
func podUsage(cg *podcgroups.Manager, logs *retention.Keeper) func(*v1.Pod) nodeprotect.Usage {
	return func(p *v1.Pod) nodeprotect.Usage {
		var u nodeprotect.Usage
		if cg.Driver != nil {
			if s, err := cg.Driver.Stats(cg.PodCgroup(p)); err == nil {
				u.MemoryWorkingSet, u.Processes = int64(s.MemoryWorkingSet), int64(s.Pids)
			}
		}
		// A process pod's own disk use is its logs.
		u.Disk = dirSize(logs.PodLogDir(p))
		return u
	}
}

// removeRotatedLogs deletes every rotated log file (name.log.N). Shims only
// write the current file, so this is safe under running containers.
func removeRotatedLogs(dataDir string, log *slog.Logger) {
	rotated, _ := filepath.Glob(filepath.Join(dataDir, "logs", "*", "*", "*.log.[0-9]*"))
	for _, f := range rotated {
		if err := os.Remove(f); err != nil {
			log.Warn("removing rotated log", "file", f, "err", err)
		}
	}
	if len(rotated) > 0 {
		log.Info("removed rotated logs under disk pressure", "files", len(rotated))
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
