package podprobes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/probes/listen"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
)

// listenProbes runs tcpSocket, httpGet and grpc startup and readiness
// probes the moment their port opens or closes: a listen.Watcher watches
// the cgroup2 directory of each pod with such a probe and its events
// poke the probe manager. Loop-owned, except the forwarding goroutine.
type listenProbes struct {
	w    listen.Watcher // nil: periodic probes only
	path listen.Path
	hier listen.Hierarchy
	pods map[types.UID]uint64 // watched pods' cgroup ids
	byID map[uint64]types.UID
	// watched is the cgroups to rescan, for the sock_diag path's
	// goroutine; started tells it a container of one started (or it was
	// first watched), so it dumps that cgroup often for a while.
	watched atomic.Pointer[[]uint64]
	started chan uint64

	// What it reads of the device: set once at setup.
	log        *slog.Logger
	cgroupsOn  bool                         // pods have cgroups to watch
	podCgroup  func(*v1.Pod) string         // a pod's cgroup, relative to the hierarchy
	podCgroups func(uid types.UID) []string // every cgroup a pod's UID may have had
	mirrored   func() bool                  // containers are placed in cgroup2 mirrors
}

// openListen opens the listen watcher: eBPF then sock_diag, or sock_diag
// alone when the config says probes.listen: sockdiag, or none for
// probes.listen: off. Failing, probes stay periodic; that is said once,
// here. The watcher's events go to reports until ctx ends.
func openListen(ctx context.Context, o Options, reports chan<- Report) *listenProbes {
	cg := o.Cgroups
	l := &listenProbes{path: listen.PathPeriodic,
		pods: map[types.UID]uint64{}, byID: map[uint64]types.UID{}, started: make(chan uint64, 64),
		log: o.Log, cgroupsOn: cg.Driver != nil, podCgroup: cg.PodCgroup, podCgroups: cg.Layout.Pods,
		mirrored: func() bool { return cg.Unified != "" }}
	if o.Listen == "off" {
		o.Log.Info("probes are periodic: probes.listen is off", "listenPath", l.path)
		return l
	}
	if cg.Driver == nil {
		o.Log.Info("probes are periodic: no cgroups to watch for listeners", "listenPath", l.path)
		return l
	}
	hier, err := listen.FindHierarchy()
	if err != nil {
		o.Log.Info("probes are periodic: no cgroup2 hierarchy to watch for listeners", "listenPath", l.path, "err", err)
		return l
	}
	if hier.Hybrid && cg.Layout.Systemd {
		// systemd places its scopes in the unified hierarchy itself, under
		// the same slice path: nothing to mirror.
		hier.Hybrid = false
	}
	paths := []listen.Path{listen.PathEBPF, listen.PathSockDiag}
	if o.Listen == "sockdiag" {
		paths = paths[1:]
	}
	w, err := listen.Open(listen.Options{MaxCgroups: o.MaxPods, Paths: paths,
		Logf: func(format string, args ...any) { o.Log.Warn(fmt.Sprintf(format, args...)) }})
	if err != nil {
		o.Log.Warn("probes are periodic: no listen watcher", "listenPath", l.path, "err", err)
		return l
	}
	l.w, l.path, l.hier = w, w.Path(), hier
	if hier.Hybrid {
		// Process containers also join a mirror of their cgroup under the
		// cgroup2 mount, so their sockets carry a cgroup the watcher sees.
		cg.Unified = hier.Mount
	}
	o.Log.Info("listen-driven probes", "listenPath", l.path, "cgroup2", hier.Mount, "hybrid", hier.Hybrid)
	if l.path == listen.PathSockDiag {
		go l.rescanListeners(ctx)
	}
	go func() {
		for e := range w.Events() {
			select {
			case reports <- Report{Listener: &e}:
			case <-ctx.Done():
				return
			}
		}
	}()
	return l
}

// close detaches everything the watcher attached.
func (l *listenProbes) close() {
	if l != nil && l.w != nil {
		if err := l.w.Close(); err != nil {
			l.log.Warn("closing the listen watcher", "err", err)
		}
	}
}

// activePath is the active path, for the node's status.
func (l *listenProbes) activePath() listen.Path {
	if l == nil {
		return listen.PathPeriodic
	}
	return l.path
}

// listenProbed reports whether a pod has a probe a listen event can
// trigger: a tcpSocket, httpGet or grpc startup or readiness probe.
func listenProbed(pod *v1.Pod) bool {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			for _, p := range []*v1.Probe{list[i].StartupProbe, list[i].ReadinessProbe} {
				if p == nil {
					continue
				}
				if _, ok := probes.ProbePort(p.ProbeHandler, list[i].Ports); ok {
					return true
				}
			}
		}
	}
	return false
}

// watch starts watching the pod's cgroup2 directory, once, if
// it has a listen-triggered probe. It runs before each container start
// (the pod's cgroup exists by then) and when probing starts (an adopted
// pod after a restart). A failure leaves the pod's probes periodic.
func (l *listenProbes) watch(pod *v1.Pod) {
	if l == nil || l.w == nil || !l.cgroupsOn || !listenProbed(pod) {
		return
	}
	if _, ok := l.pods[pod.UID]; ok {
		return
	}
	rel := l.podCgroup(pod)
	dir, err := l.hier.Dir(rel)
	if err == nil && l.hier.Hybrid {
		// The mirror of the pod's v1 cgroup; the process runtime places
		// each container in its own directory below (Cgroups.Unified).
		err = os.MkdirAll(dir, 0o755)
	}
	if err != nil {
		l.log.Warn("probes of this pod are periodic: its cgroup2 directory", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	id, err := l.w.Watch(dir)
	if err != nil {
		l.log.Warn("probes of this pod are periodic: cannot watch its listeners", "pod", pod.Namespace+"/"+pod.Name, "err", err)
		return
	}
	l.pods[pod.UID], l.byID[id] = id, pod.UID
	l.publish()
	l.kick(id)
	l.log.Info("listeners watched", "pod", pod.Namespace+"/"+pod.Name, "listenPath", l.path)
}

// publish hands the rescanning goroutine the watched cgroups.
func (l *listenProbes) publish() {
	ids := make([]uint64, 0, len(l.pods))
	for _, id := range l.pods {
		ids = append(ids, id)
	}
	l.watched.Store(&ids)
}

// unwatch stops watching a pod that is gone and, on a hybrid
// host, removes the cgroup2 mirror its containers were placed in.
func (l *listenProbes) unwatch(uid types.UID) {
	if l == nil || l.w == nil {
		return
	}
	if id, ok := l.pods[uid]; ok {
		if err := l.w.Unwatch(id); err != nil {
			l.log.Warn("unwatching a pod's listeners", "uid", uid, "err", err)
		}
		delete(l.pods, uid)
		delete(l.byID, id)
		l.publish()
	}
	if !l.mirrored() {
		return
	}
	for _, rel := range l.podCgroups(uid) { // wherever its QoS class put it
		if err := l.hier.Remove(rel); err != nil {
			l.log.Warn("removing a pod's cgroup2 mirror", "cgroup", rel, "err", err)
		}
	}
}

// listened pokes the probes of the pod whose cgroup saw a listener open
// or close: those of each of its containers' current instance. instance
// is the loop's view of a pod (nil: gone).
func (l *listenProbes) listened(e listen.Event, instance func(types.UID) *lifecycle.Instance, m manager) {
	uid, ok := l.byID[e.Cgroup]
	if !ok {
		return // unwatched since
	}
	in := instance(uid)
	if in == nil {
		return
	}
	n := 0
	for _, list := range [][]v1.Container{in.Pod.Spec.InitContainers, in.Pod.Spec.Containers} {
		for i := range list {
			if c := in.Container(list[i].Name); c != nil && c.InstanceID != "" {
				n += m.Listening(c.InstanceID, int(e.Port), e.Kind == listen.Listening)
			}
		}
	}
	if n > 0 {
		l.log.Debug("listener triggered probes", "pod", in.Key(), "event", e.String(), "probes", n)
	}
}

// rescan has the pod's listeners dumped at once and then often for a
// while (after a container start), off the loop: the sock_diag path
// learns of listeners only by dumps.
func (l *listenProbes) rescan(uid types.UID) {
	if l == nil || l.w == nil {
		return
	}
	if id, ok := l.pods[uid]; ok {
		l.kick(id)
	}
}

// kick tells the rescanning goroutine (sock_diag path only) that a
// container of the cgroup started. It never blocks the loop: with the
// channel full, the cgroup is dumped on its slow timer.
func (l *listenProbes) kick(id uint64) {
	if l.path != listen.PathSockDiag {
		return
	}
	select {
	case l.started <- id:
	default:
	}
}

// rescanListeners dumps the watched pods' listeners on the schedule
// listen.NextDump gives (often just after a container start, slowly
// otherwise) until ctx ends, on the sock_diag path only.
func (l *listenProbes) rescanListeners(ctx context.Context) {
	type schedule struct{ started, last time.Time }
	due := map[uint64]*schedule{}
	logged := map[string]bool{} // rescan errors said already
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case id := <-l.started:
			due[id] = &schedule{started: time.Now(), last: time.Time{}}
		case <-timer.C:
		}
		now := time.Now()
		next := now.Add(listen.DumpSlow)
		var ids []uint64
		if p := l.watched.Load(); p != nil {
			ids = *p
		}
		watched := make(map[uint64]bool, len(ids))
		var sweep []uint64 // due now: dumped together, one dump per network namespace
		for _, id := range ids {
			watched[id] = true
			s := due[id]
			if s == nil { // watched before the goroutine heard of it
				s = &schedule{last: now}
				due[id] = s
			}
			if !listen.NextDump(s.started, s.last).After(now) {
				sweep = append(sweep, id)
			}
		}
		if len(sweep) > 0 {
			if err := l.w.Rescan(sweep...); err != nil {
				l.rescanFailed(err, logged)
			}
			done := time.Now()
			for _, id := range sweep {
				due[id].last = done
			}
		}
		for _, id := range ids {
			if at := listen.NextDump(due[id].started, due[id].last); at.Before(next) {
				next = at
			}
		}
		for id := range due {
			if !watched[id] {
				delete(due, id)
			}
		}
		timer.Reset(time.Until(next))
	}
}

// rescanFailed says what a sweep could not dump, once per distinct error
// (a bounded memory): a pod unwatched since is expected and not said; any
// other failure leaves that pod's listeners unseen, its probes waiting
// for their period, which must show.
func (l *listenProbes) rescanFailed(err error, logged map[string]bool) {
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		if errors.Is(e, listen.ErrNotWatched) || logged[e.Error()] {
			continue
		}
		if len(logged) >= 64 {
			clear(logged)
		}
		logged[e.Error()] = true
		l.log.Warn("a pod's listeners could not be dumped; its probes wait for their period", "err", e)
	}
}
