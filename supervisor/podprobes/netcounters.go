package podprobes

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/probes/listen"
	"github.com/podvisor/podvisor/probes/netcount"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// netCounters counts each pod's traffic: from the host side of its veth
// when it has a CNI network of its own, else from cgroup_skb programs on
// its cgroup2 directory, else not at all (the stats leave it out).
// Loop-owned.
type netCounters struct {
	c    *netcount.Counter // nil: no eBPF counting
	hier listen.Hierarchy
	// mirrors says the counters set Cgroups.Unified (the listen watcher did
	// not), so they remove a gone pod's cgroup2 mirror.
	mirrors bool
	pods    map[types.UID]*podNet

	// What it reads of the device: set once at setup.
	log        *slog.Logger
	cgroupsOn  bool                          // pods have cgroups to attach programs to
	runtimeOf  func(*v1.Pod) runtime.Runtime // the runtime that runs a pod
	podCgroup  func(*v1.Pod) string          // a pod's cgroup, relative to the hierarchy
	podCgroups func(uid types.UID) []string  // every cgroup a pod's UID may have had
}

// podNet is where one pod's counters come from.
type podNet struct {
	source     netcount.Source // "" when none is known yet
	id         uint64          // SourceEBPF: the counted cgroup
	dir        string          // SourceEBPF: its cgroup2 directory
	veth       string          // SourceVeth: the host side
	vethLooked bool            // its attached network was searched for a veth
	noEBPF     bool            // eBPF cannot count it (tried, or never in cgroup2)
}

// openNetCounters opens the eBPF counters, after the listen watcher
// (which may already mirror process containers into cgroup2) and before
// the runtimes (which place containers where Cgroups.Unified says).
func openNetCounters(o Options) *netCounters {
	cg := o.Cgroups
	n := &netCounters{pods: map[types.UID]*podNet{}, log: o.Log, cgroupsOn: cg.Driver != nil,
		runtimeOf: o.RuntimeOf, podCgroup: cg.PodCgroup, podCgroups: cg.Layout.Pods}
	if cg.Driver == nil {
		o.Log.Info("network counters from veths only: no cgroups to attach programs to")
		return n
	}
	hier, err := listen.FindHierarchy()
	if err != nil {
		o.Log.Info("network counters from veths only: no cgroup2 hierarchy", "err", err)
		return n
	}
	if hier.Hybrid && cg.Layout.Systemd {
		hier.Hybrid = false // systemd mirrors its scopes into the unified hierarchy itself
	}
	c, err := netcount.Open(netcount.Options{MaxPods: o.MaxPods,
		Logf: func(format string, args ...any) { o.Log.Warn(fmt.Sprintf(format, args...)) }})
	if err != nil {
		o.Log.Info("network counters from veths only: no eBPF", "err", err)
		return n
	}
	n.c, n.hier = c, hier
	if hier.Hybrid && cg.Unified == "" {
		cg.Unified, n.mirrors = hier.Mount, true
	}
	o.Log.Info("network counters", "source", netcount.SourceEBPF, "cgroup2", hier.Mount, "hybrid", hier.Hybrid)
	return n
}

// close detaches every program.
func (n *netCounters) close() {
	if n != nil && n.c != nil {
		if err := n.c.Close(); err != nil {
			n.log.Warn("closing the network counters", "err", err)
		}
	}
}

// watch starts counting a pod, once it can: before its first
// container starts (eBPF sees the first packet), and again from Stats
// for a pod adopted after a restart or whose network came up since. A
// pod with a host-side veth moves to it from eBPF once the veth exists.
func (n *netCounters) watch(pod *v1.Pod) {
	if n == nil {
		return
	}
	p := n.pods[pod.UID]
	if p == nil {
		p = &podNet{}
		n.pods[pod.UID] = p
	}
	if p.source == netcount.SourceVeth {
		return
	}
	if !p.vethLooked && !pod.Spec.HostNetwork {
		if veth, ok := n.podVeth(pod); ok {
			p.vethLooked = true
			if veth != "" {
				if p.source == netcount.SourceEBPF {
					// The veth counts the same traffic, for free.
					if err := n.c.Unwatch(p.id); err != nil {
						n.log.Warn("detaching a pod's network counters", "pod", pod.Namespace+"/"+pod.Name, "err", err)
					}
				}
				p.source, p.veth = netcount.SourceVeth, veth
				n.log.Info("network counters", "pod", pod.Namespace+"/"+pod.Name, "source", p.source, "veth", veth)
				return
			}
		}
	}
	if p.source != "" || p.noEBPF || n.c == nil || !n.cgroupsOn {
		return
	}
	if _, inContainer := n.runtimeOf(pod).(runtime.InContainer); inContainer && n.hier.Hybrid {
		// On a hybrid host only process containers are mirrored into
		// cgroup2: programs on an empty mirror would count zero, which
		// is wrong, not absent.
		p.noEBPF = true
		return
	}
	dir, err := n.hier.Dir(n.podCgroup(pod))
	if err == nil && n.hier.Hybrid {
		err = os.MkdirAll(dir, 0o755) // the mirror the containers are placed in
	}
	if err == nil {
		p.id, err = n.c.Watch(dir)
	}
	if err != nil {
		n.log.Warn("no network counters for this pod", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		p.noEBPF = true // tried; not again
		return
	}
	p.source, p.dir = netcount.SourceEBPF, dir
	n.log.Info("network counters", "pod", pod.Namespace+"/"+pod.Name, "source", p.source)
}

// podVeth finds the host side of the pod's veth once its network is
// attached (ok false: not yet, ask again later). veth "" means it has
// none (host network, loopback only).
func (n *netCounters) podVeth(pod *v1.Pod) (veth string, ok bool) {
	rt := n.runtimeOf(pod)
	ic, isIn := rt.(runtime.InContainer)
	pn, hasIPs := rt.(runtime.PodNetworks)
	if !isIn || !hasIPs {
		return "", true
	}
	netns := ic.NetNS(pod)
	if netns == "" {
		return "", true
	}
	if len(pn.PodIPs(pod)) == 0 {
		return "", false // not attached yet
	}
	veth, err := netcount.HostVeth(netns)
	if err != nil {
		n.log.Info("no veth to count this pod's traffic by", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return "", true
	}
	return veth, true
}

// read is the pod's counters for the stats API, nil when none.
func (n *netCounters) read(uid types.UID) *api.NetStats {
	if n == nil || n.pods[uid] == nil {
		return nil
	}
	p := n.pods[uid]
	var c netcount.Counters
	var err error
	switch p.source {
	case netcount.SourceEBPF:
		if n.hier.Hybrid && !populated(p.dir) {
			// Its processes are not in the cgroup2 mirror (started by a
			// daemon that did not mirror them): the programs see nothing.
			return nil
		}
		c, err = n.c.Read(p.id)
	case netcount.SourceVeth:
		c, err = netcount.ReadVeth(p.veth)
	default:
		return nil
	}
	if err != nil {
		n.log.Debug("reading a pod's network counters", "uid", uid, "err", err)
		return nil
	}
	return &api.NetStats{Source: string(p.source), RxBytes: c.RxBytes, RxPackets: c.RxPackets, TxBytes: c.TxBytes, TxPackets: c.TxPackets}
}

// unwatch stops counting a gone pod and, when the counters made it,
// removes its cgroup2 mirror.
func (n *netCounters) unwatch(uid types.UID) {
	if n == nil {
		return
	}
	if p := n.pods[uid]; p != nil && p.source == netcount.SourceEBPF {
		if err := n.c.Unwatch(p.id); err != nil {
			n.log.Warn("detaching a pod's network counters", "uid", uid, "err", err)
		}
	}
	delete(n.pods, uid)
	if !n.mirrors {
		return
	}
	for _, rel := range n.podCgroups(uid) {
		if err := n.hier.Remove(rel); err != nil {
			n.log.Warn("removing a pod's cgroup2 mirror", "cgroup", rel, "err", err)
		}
	}
}

// populated reports whether a cgroup2 directory or one below it holds a
// process (cgroup.events: "populated 1").
func populated(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), "populated 1")
}
