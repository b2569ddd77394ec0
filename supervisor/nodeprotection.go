package supervisor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/pressure"
)

// setupNodeProtection reads the device's memory and prepares pressure
// eviction, drain and the node's status.
func (d *Daemon) setupNodeProtection() error {
	p, err := nodeprotect.New(nodeprotect.Options{
		Log: d.log, Now: d.now, DataDir: d.cfg.DataDir,
		MemoryCgroup: cgroups.V1MemoryMount(), Memory: pressure.MemTotal(),
		NodeName: d.cfg.NodeName, HostIP: d.node.HostIP, Node: nodeConfig(d.cfg, d.opts.Version),
		Eviction: evictionConfig(d.cfg), ShutdownBuckets: ShutdownBuckets(d.cfg),
		Usage: d.podUsage, Observed: d.collectImages,
	})
	d.protector = p
	return err
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
		d.images.PruneUnused()
	}
	if e := dec.Evict; e != nil {
		d.record(d.machine.Instance(e.Pod), "Warning", nodeprotect.ReasonThresholdMet, e.Event)
		d.execute(d.machine.Evict(e.Pod, e.Message, e.GracePeriod, e.At))
	}
}

// stopDrained stops the pods a drain's bucket takes.
func (d *Daemon) stopDrained(stops []nodeprotect.Stop) {
	for _, s := range stops {
		d.execute(d.machine.Fail(s.Pod, s.Reason, s.Message, s.GracePeriod, s.At))
	}
}

// Drain stops every pod, lowest priority bucket first, and admits nothing
// until Uncordon. It returns once every pod has ended, or the buckets'
// time is up.
func (d *Daemon) Drain(reason string) error {
	var done <-chan struct{}
	err := d.do(func() error {
		var stops []nodeprotect.Stop
		done, stops = d.protector.Drain(reason, d.machine)
		d.stopDrained(stops)
		return nil
	})
	if err != nil {
		return err
	}
	<-done
	return nil
}

// Uncordon ends a drain: pods are admitted again, and those the drain
// stopped run again, as static pods do when a node boots after a shutdown.
// Pods a drain stopped before the daemon restarted (which forgot the
// drain) run again too.
func (d *Daemon) Uncordon() error {
	return d.do(func() error {
		return d.protector.Uncordon(func() int {
			revived := 0
			for _, in := range d.machine.Instances() {
				if d.machine.Revive(in.UID()) {
					revived++
				}
			}
			return revived
		})
	})
}

// NodeView is the device as a v1.Node.
func (d *Daemon) NodeView() *v1.Node {
	return d.protector.NodeView(d.probing.NodeAnnotations())
}

// podUsage is what a running pod uses, for eviction ranking.
func (d *Daemon) podUsage(p *v1.Pod) nodeprotect.Usage {
	var u nodeprotect.Usage
	if d.cgroups.Driver != nil {
		if s, err := d.cgroups.Driver.Stats(d.cgroups.PodCgroup(p)); err == nil {
			u.MemoryWorkingSet, u.Processes = int64(s.MemoryWorkingSet), int64(s.Pids)
		}
	}
	// A process pod's own disk use is its logs.
	u.Disk = dirSize(d.retention.PodLogDir(p))
	return u
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

// collectImages hands every pressure observation to the image collector
// (the runtimes are set up after the protector, so it is looked up late).
func (d *Daemon) collectImages(obs map[eviction.Signal]eviction.Observation) { d.images.Collect(obs) }
