// Package nodeprotect keeps the node alive under pressure and through a
// shutdown, as the kubelet does: it watches memory, disk and PID pressure
// and paces node-pressure eviction, drains the node by priority buckets,
// and reports the node's capacity, allocatable and conditions. The
// decisions are eviction's (which threshold, which victim) and admission's;
// the observations are pressure's. The loop that owns the lifecycle
// Machine asks it and carries out what it returns: the pods to evict or
// stop, the node-level reclaim to run.
package nodeprotect

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

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

// Observer reads the eviction signals: pressure.Observer reads them from
// /proc, the file systems and the memory cgroup.
type Observer interface {
	Observe() map[eviction.Signal]eviction.Observation
}

// Pods is what the protector reads of the pods: the loop's
// *lifecycle.Machine, read on the loop goroutine and never changed.
type Pods interface {
	Instance(uid types.UID) *lifecycle.Instance
	Instances() []*lifecycle.Instance
}

// Usage is what a pod uses now, for eviction ranking.
type Usage struct {
	MemoryWorkingSet int64
	Processes        int64
	Disk             int64 // its logs: a process pod's own disk use
}

// Options configure a Protector.
type Options struct {
	Log *slog.Logger
	Now func() time.Time
	// DataDir holds the pods' data and logs: the node file system.
	DataDir string
	// ImageFS is a path on the file system containerd keeps images on
	// ("": no images).
	ImageFS string
	// MemoryCgroup is the v1 memory hierarchy's mount ("" without one):
	// its root's usage is watched by a threshold event.
	MemoryCgroup string
	// Memory is the device's memory in bytes (pressure.MemTotal).
	Memory   int64
	NodeName string
	HostIP   string
	Node     NodeConfig
	Eviction EvictionConfig
	// ShutdownBuckets order a node shutdown or drain: at least one (the
	// config's default is the kubelet's order).
	ShutdownBuckets []ShutdownBucket
	// Usage says what a running pod uses (nil: nothing known).
	Usage func(*v1.Pod) Usage
	// Observed sees every observation before it is judged: the image
	// garbage collector runs at every look.
	Observed func(map[eviction.Signal]eviction.Observation)
	// Observer reads the signals (nil: pressure.Observer on DataDir,
	// ImageFS and MemoryCgroup).
	Observer Observer
	// Notifier is where the kernel's and the safety net's wake-ups
	// arrive (nil: a new one).
	Notifier *pressure.Notifier
}

// Protector is the node's protection: pressure conditions, eviction
// pacing and drain. Every method but the channels' is for the loop
// goroutine alone.
type Protector struct {
	log          *slog.Logger
	now          func() time.Time
	dataDir      string
	memoryCgroup string
	memory       int64
	nodeName     string
	hostIP       string
	node         NodeConfig
	monitor      time.Duration
	buckets      []ShutdownBucket
	usage        func(*v1.Pod) Usage
	observed     func(map[eviction.Signal]eviction.Observation)

	mgr       *eviction.Manager
	observer  Observer
	notifier  *pressure.Notifier
	threshold *pressure.MemoryThreshold
	memLimit  int64 // hard memory.available threshold in bytes, for the eventfd
	recheck   *time.Timer
	pacer     eviction.Pacer
	// conditions are the node conditions currently true.
	conditions map[v1.NodeConditionType]bool
	draining   *drain
	// podAllocatable is what ReadAllocatable read, for the downward API.
	podAllocatable v1.ResourceList
}

// UseImageFS tells the observer where the runtime keeps its images, once
// the runtimes are up ("": none); the first look comes after it.
func (p *Protector) UseImageFS(path string) {
	if o, ok := p.observer.(pressure.Observer); ok {
		o.ImageFsPath = path
		p.observer = o
	}
}

// New prepares a protector; Watch arms the kernel's notifications. It
// fails on eviction thresholds eviction.Parse rejects.
func New(o Options) (*Protector, error) {
	if len(o.ShutdownBuckets) == 0 {
		return nil, errors.New("node protection: no shutdown buckets, so a drain could stop no pod")
	}
	c := o.Eviction
	ts, err := eviction.Parse(c.Hard, c.Soft, c.SoftGracePeriod, c.MinimumReclaim)
	if err != nil {
		return nil, err
	}
	p := &Protector{
		log: o.Log, now: o.Now, dataDir: o.DataDir, memoryCgroup: o.MemoryCgroup, memory: o.Memory,
		nodeName: o.NodeName, hostIP: o.HostIP, node: o.Node, monitor: c.MonitorPeriod,
		buckets: o.ShutdownBuckets, usage: o.Usage, observed: o.Observed,
		mgr:        &eviction.Manager{Thresholds: ts, TransitionPeriod: c.PressureTransitionPeriod, MaxPodGracePeriod: c.MaxPodGracePeriod},
		observer:   o.Observer,
		notifier:   o.Notifier,
		recheck:    time.NewTimer(time.Hour),
		conditions: map[v1.NodeConditionType]bool{},
	}
	p.recheck.Stop()
	if p.now == nil {
		p.now = time.Now
	}
	if p.observer == nil {
		p.observer = pressure.Observer{FsPath: o.DataDir, ImageFsPath: o.ImageFS, MemoryCgroup: o.MemoryCgroup}
	}
	if p.notifier == nil {
		p.notifier = pressure.NewNotifier(o.Log)
	}
	for _, t := range ts {
		if t.Signal == eviction.MemoryAvailable && !t.Soft {
			p.memLimit = t.Quantity
			if t.Percentage > 0 {
				p.memLimit = int64(t.Percentage * float64(o.Memory))
			}
		}
	}
	return p, nil
}

// Watch arms the kernel's notifications until ctx ends: the v1 memory
// cgroup's threshold event, PSI triggers, and, on cgroup v2, the pods'
// cgroup podsCgroup's (a directory; "" on v1) pressure and memory events;
// and the periodic safety net behind them. The first look follows, with
// pressure.WakeStart.
func (p *Protector) Watch(ctx context.Context, podsCgroup string) {
	if p.memoryCgroup != "" {
		p.threshold = p.notifier.NewMemoryThreshold(p.memoryCgroup)
	}
	// A 2 s window: without CAP_SYS_RESOURCE (dropped in some sandboxes
	// even for root) kernels accept only multiples of 2 s.
	psi := []string{"/proc/pressure/memory"}
	if podsCgroup != "" {
		// The pods' own pressure and memory events: pods stalling on
		// memory, hitting a limit or OOM-killed are looked at at once.
		psi = append(psi, filepath.Join(podsCgroup, "memory.pressure"))
		if err := p.notifier.Modified(ctx, filepath.Join(podsCgroup, "memory.events")); err != nil {
			p.log.Warn("no memory.events notification for the pods' cgroup", "err", err)
		}
	}
	err := p.notifier.PSI(ctx, 150*time.Millisecond, 2*time.Second, psi...)
	if err != nil && len(psi) > 1 {
		p.log.Warn("no PSI trigger on the pods' cgroup; using the system's alone", "err", err)
		err = p.notifier.PSI(ctx, 150*time.Millisecond, 2*time.Second, psi[0])
	}
	if err != nil {
		p.log.Warn("no PSI trigger; memory pressure is seen through thresholds and the periodic check", "err", err)
	}
	p.notifier.Every(ctx, p.monitor)
}

// Woken is ready when the kernel or the safety net asks for a look: call
// Wake then.
func (p *Protector) Woken() <-chan struct{} { return p.notifier.C }

// Recheck is ready when the signals are due for another look, with
// pressure.WakeRecheck: pressure lasting, a soft grace or transition
// period ending.
func (p *Protector) Recheck() <-chan time.Time { return p.recheck.C }

// Memory is the device's memory in bytes, for OOM scores.
func (p *Protector) Memory() int64 { return p.memory }
