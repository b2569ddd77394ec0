// Package podprobes is what the daemon learns of running pods from the
// outside: their probes' verdicts, run on their period and the moment a
// probed port opens or closes (a listen watcher on the pods' cgroup2
// directories), and their traffic counters. It is loop-owned; what it
// learns reaches the loop on one channel, and the loop applies it to the
// lifecycle machine.
package podprobes

import (
	"context"
	"log/slog"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/probes/listen"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podcgroups"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// ListenPathAnnotation on the node says how probes learn that a port
// opened: ebpf-sockops, sock_diag or periodic.
const ListenPathAnnotation = "podvisor.io/listen-path"

// Options are what probing reads of the device.
type Options struct {
	// Listen is the best path probes may learn of listeners by (config
	// probes.listen): "ebpf" (also ""), "sockdiag" or "off".
	Listen string
	// MaxPods bounds the cgroups watched for listeners and counted.
	MaxPods int
	// Cgroups are the pods' cgroups, set up (Driver nil without cgroups).
	// Open may set their Unified: where process containers are mirrored
	// into cgroup2, for their sockets and packets to be seen there.
	Cgroups *podcgroups.Manager
	// RuntimeOf is the runtime that runs a pod (nil: none).
	RuntimeOf func(*v1.Pod) runtime.Runtime
	Log       *slog.Logger
	// Ran is told of every probe run (probes.Manager.Ran); nil: nothing.
	Ran func(instanceID string, kind vocab.ProbeKind, ok bool, took time.Duration)
}

// Report is one thing probing learnt for the loop: a probe's changed
// verdict or warning (Result), or, when Listener is set, a listener that
// opened or closed in a watched pod, to hand back to [Prober.Listened].
type Report struct {
	Result   probes.Result
	Listener *listen.Event
}

// manager is what probing uses of a probes.Manager; tests fake it.
type manager interface {
	Start(instanceID string, c *v1.Container, t probes.Target)
	Stop(instanceID string, kinds ...vocab.ProbeKind)
	Listening(instanceID string, port int, opened bool) int
	Results() <-chan probes.Result
}

// Prober runs the pods' probes, the listen watcher that triggers them
// and the traffic counters. Loop-owned.
type Prober struct {
	manager manager
	listen  *listenProbes
	net     *netCounters
	reports chan Report
	// closed ends the forwarding of probe results: not ctx, so that the
	// verdicts of probes that ran before the daemon was told to stop still
	// reach a loop that stops the pods.
	closed chan struct{}
}

// Open starts probing: the listen watcher, then the counters, which both
// may set o.Cgroups.Unified, so it runs before the runtimes are made.
// Probes and the watcher stop when ctx ends; Close frees the rest.
func Open(ctx context.Context, o Options) *Prober {
	m := probes.NewManager(ctx)
	m.Ran = o.Ran
	p := &Prober{manager: m, reports: make(chan Report, 256), closed: make(chan struct{})}
	p.listen = openListen(ctx, o, p.reports)
	p.net = openNetCounters(o)
	go p.forward(p.manager.Results())
	return p
}

// forward hands the loop the probes' results until Close.
func (p *Prober) forward(results <-chan probes.Result) {
	for {
		select {
		case r := <-results:
			select {
			case p.reports <- Report{Result: r}:
			case <-p.closed:
				return
			}
		case <-p.closed:
			return
		}
	}
}

// Close detaches the counters' programs and the listen watcher's.
func (p *Prober) Close() {
	if p == nil {
		return
	}
	p.net.close()
	p.listen.close()
	close(p.closed)
}

// Reports is the loop's channel of what probing learnt (nil: none).
func (p *Prober) Reports() <-chan Report {
	if p == nil {
		return nil
	}
	return p.reports
}

// Start probes a container instance, after watching its pod's listeners
// if it is not watched yet (an adopted pod after a restart).
func (p *Prober) Start(pod *v1.Pod, instanceID string, spec *v1.Container, t probes.Target) {
	p.listen.watch(pod)
	p.manager.Start(instanceID, spec, t)
}

// Stop ends the given probes of an instance, or all of them.
func (p *Prober) Stop(instanceID string, kinds ...vocab.ProbeKind) {
	p.manager.Stop(instanceID, kinds...)
}

// Watch starts watching a pod's listeners and counting its traffic, once
// each can; it runs before each container start (the pod's cgroup exists
// by then), so that its listen() is seen and its first packet counted.
func (p *Prober) Watch(pod *v1.Pod) {
	if p == nil {
		return
	}
	p.listen.watch(pod)
	p.net.watch(pod)
}

// Unwatch stops watching and counting a pod that is gone and removes the
// cgroup2 mirrors made for it.
func (p *Prober) Unwatch(uid types.UID) {
	if p == nil {
		return
	}
	p.net.unwatch(uid) // before the listen watcher removes the cgroup2 mirror
	p.listen.unwatch(uid)
}

// ContainerStarted has the pod's listeners looked for at once and often
// for a while, on the path that learns of them only by looking.
func (p *Prober) ContainerStarted(uid types.UID) {
	if p == nil {
		return
	}
	p.listen.rescan(uid)
}

// Listened runs the probes a listener's opening or closing triggers (a
// Report's Listener); instance is the loop's view of a pod (nil: gone).
func (p *Prober) Listened(e listen.Event, instance func(types.UID) *lifecycle.Instance) {
	p.listen.listened(e, instance, p.manager)
}

// NetStats is a pod's traffic for the stats API (nil: not counted). A pod
// adopted after a restart, or whose network attached since, is counted
// from then on.
func (p *Prober) NetStats(pod *v1.Pod) *api.NetStats {
	if p == nil {
		return nil
	}
	p.net.watch(pod)
	return p.net.read(pod.UID)
}

// NodeAnnotations are what probing says of the node: its listen path.
func (p *Prober) NodeAnnotations() map[string]string {
	path := listen.PathPeriodic
	if p != nil {
		path = p.listen.activePath()
	}
	return map[string]string{ListenPathAnnotation: string(path)}
}
