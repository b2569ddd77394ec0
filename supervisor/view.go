package supervisor

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// maxEvents is how many events each pod keeps.
const maxEvents = 50

// StatusInvalid is the STATUS of a manifest file that was rejected.
const StatusInvalid = "Invalid"

// publish rebuilds the status the API serves and wakes its watchers.
func (d *Daemon) publish(now time.Time) {
	var pods []*v1.Pod
	logs := map[string]api.LogRef{}
	seen := map[types.UID]bool{}
	for _, in := range d.machine.Instances() {
		p := d.podView(in, now)
		seen[in.UID()] = true
		pods = append(pods, p)
		if in.Terminating && d.hasDesired(in.Key()) {
			continue // the replacement's logs are the ones to show
		}
		reader, _ := d.runtimes.Of(in.Pod).(runtime.LogReader)
		for _, c := range in.AllContainers() {
			key := in.Key() + "/" + c.Name
			if c.Attempt > 0 {
				logs[key] = api.LogRef{Path: d.logPath(in.Pod, c.Name, c.Attempt), InstanceID: c.InstanceID,
					Running: c.Phase == lifecycle.Running || c.Phase == lifecycle.Starting, Reader: reader}
			}
			if prev := previousAttempt(c); prev > 0 {
				logs[key+"/previous"] = api.LogRef{Path: d.logPath(in.Pod, c.Name, prev), Reader: reader}
			}
		}
	}
	for uid := range d.views {
		if !seen[uid] {
			delete(d.views, uid)
		}
	}
	for _, p := range d.machine.PendingView() {
		p.Spec.NodeName = d.cfg.NodeName
		pods = append(pods, p)
	}
	for _, bad := range d.manifests.Invalid {
		pods = append(pods, invalidRow(bad))
	}
	v := d.view
	v.mu.Lock()
	v.pods, v.logs = pods, logs
	v.version++
	close(v.changed)
	v.changed = make(chan struct{})
	v.mu.Unlock()
}

// podView returns the instance as a v1.Pod, rebuilt only when the instance
// changed: with many pods, one event must not copy them all.
func (d *Daemon) podView(in *lifecycle.Instance, now time.Time) *v1.Pod {
	if v, ok := d.views[in.UID()]; ok && v.revision == in.Revision() {
		return v.pod
	}
	p := d.machine.PodView(in, now)
	p.Spec.NodeName = d.cfg.NodeName
	p.Status.HostIP = d.node.HostIP
	p.Status.HostIPs = []v1.HostIP{{IP: d.node.HostIP}}
	ips := []string{d.node.HostIP}
	rt := d.runtimes.Of(p)
	switch pn, ok := rt.(runtime.PodNetworks); {
	case p.Spec.HostNetwork:
	case ok:
		ips = pn.PodIPs(p)
	case rt == nil:
		ips = nil // no runtime here to give it an address
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0]
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, v1.PodIP{IP: ip})
		}
	}
	if sd, ok := rt.(runtime.StatusDecorator); ok {
		sd.DecorateStatuses(p.Status.InitContainerStatuses)
		sd.DecorateStatuses(p.Status.ContainerStatuses)
	}
	d.views[in.UID()] = cachedView{revision: in.Revision(), pod: p}
	return p
}

type cachedView struct {
	revision uint64
	pod      *v1.Pod
}

func (d *Daemon) hasDesired(key string) bool {
	for _, p := range d.manifests.Pods {
		if lifecycle.KeyOf(p) == key {
			return true
		}
	}
	return false
}

// previousAttempt is the attempt of the instance shown as lastState: what
// "logs --previous" reads, whatever the container is doing now.
func previousAttempt(c *lifecycle.Container) int {
	if c.Last == nil {
		return 0
	}
	_, _, n, _ := vocab.ParseInstanceID(c.Last.InstanceID)
	return n
}

// invalidRow shows a rejected manifest file in pod listings, named after
// the file, until it is fixed or removed.
func invalidRow(bad manifest.Invalid) *v1.Pod {
	return &v1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			Name: filepath.Base(bad.File), Namespace: "default",
			CreationTimestamp: metav1.NewTime(bad.Since),
			Annotations: map[string]string{
				manifest.AnnotationSource: manifest.SourceFile,
				manifest.AnnotationFile:   bad.File,
			},
		},
		Status: v1.PodStatus{Phase: v1.PodPending, Reason: StatusInvalid, Message: bad.File + ": " + bad.Err.Error()},
	}
}

// noteInvalid records a FailedValidation event for each newly rejected
// file, on its row and on the pods it still keeps running.
func (d *Daemon) noteInvalid(old, cur manifest.State) {
	before := map[string]string{}
	for _, b := range old.Invalid {
		before[b.File] = b.Err.Error()
	}
	for _, b := range cur.Invalid {
		if before[b.File] == b.Err.Error() {
			continue
		}
		msg := fmt.Sprintf("%s: %v", b.File, b.Err)
		d.addEvent("default/"+filepath.Base(b.File), "Warning", "FailedValidation", msg)
		for _, p := range cur.Pods {
			if p.Annotations[manifest.AnnotationFile] == b.File {
				d.addEvent(lifecycle.KeyOf(p), "Warning", "FailedValidation", msg+" (still running the last valid version)")
			}
		}
	}
}

// record logs an event about a pod instance and keeps it for describe.
func (d *Daemon) record(in *lifecycle.Instance, typ, reason, msg string) {
	if in == nil {
		return
	}
	d.addEvent(in.Key(), typ, reason, msg)
}

func (d *Daemon) addEvent(key, typ, reason, msg string) {
	if typ == "Warning" {
		d.log.Warn(msg, "pod", key, "reason", reason)
	} else {
		d.log.Info(msg, "pod", key, "reason", reason)
	}
	now := d.now()
	d.podEvent(key, typ, reason, msg, now)
	v := d.view
	v.mu.Lock()
	defer v.mu.Unlock()
	evs := v.events[key]
	if n := len(evs); n > 0 && evs[n-1].Reason == reason && evs[n-1].Message == msg {
		evs[n-1].Count++
		evs[n-1].LastTime = now
		return
	}
	evs = append(evs, api.Event{FirstTime: now, LastTime: now, Count: 1, Type: typ, Reason: reason, Message: msg})
	if len(evs) > maxEvents {
		evs = evs[len(evs)-maxEvents:]
	}
	v.events[key] = evs
}

// Pods implements api.Backend.
func (d *Daemon) Pods() ([]*v1.Pod, uint64, <-chan struct{}) {
	v := d.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	return v.pods, v.version, v.changed
}

// Events implements api.Backend.
func (d *Daemon) Events(namespace, name string) []api.Event {
	v := d.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	return append([]api.Event(nil), v.events[namespace+"/"+name]...)
}

// Log implements api.Backend.
func (d *Daemon) Log(namespace, name, container string, previous bool) (api.LogRef, error) {
	key := namespace + "/" + name + "/" + container
	if previous {
		key += "/previous"
	}
	v := d.view
	v.mu.RLock()
	defer v.mu.RUnlock()
	ref, ok := v.logs[key]
	if !ok {
		if previous {
			return ref, fmt.Errorf("previous terminated container %q in pod %q not found", container, name)
		}
		return ref, fmt.Errorf("container %q in pod %q has not started", container, name)
	}
	return ref, nil
}

// Delete implements api.Backend: it terminates a pod instance with an
// optional shorter grace period, or at once with force. A pod whose source
// still asks for it is started again afterwards.
func (d *Daemon) Delete(namespace, name string, grace *int64, force bool) (api.DeleteResult, error) {
	var res api.DeleteResult
	err := d.do(func() error {
		in := d.current(namespace, name)
		if in == nil {
			return fmt.Errorf("pod %q not found in namespace %q", name, namespace)
		}
		var g *time.Duration
		if grace != nil {
			gd := time.Duration(*grace) * time.Second
			g = &gd
		}
		res.Source = in.Pod.Annotations[manifest.AnnotationSource]
		res.File = in.Pod.Annotations[manifest.AnnotationFile]
		res.Recreated = d.hasDesired(in.Key())
		return d.machine.Delete(in.UID(), g, force, d.now())
	})
	return res, err
}

// SetCondition implements api.Backend for readiness gates.
func (d *Daemon) SetCondition(namespace, name string, typ v1.PodConditionType, status bool) error {
	return d.do(func() error {
		in := d.current(namespace, name)
		if in == nil {
			return fmt.Errorf("pod %q not found in namespace %q", name, namespace)
		}
		gated := false
		for _, g := range in.Pod.Spec.ReadinessGates {
			gated = gated || g.ConditionType == typ
		}
		if !gated {
			return fmt.Errorf("pod %q has no readiness gate %q", name, typ)
		}
		return d.machine.SetCondition(in.UID(), typ, status)
	})
}

// current is the newest instance of a pod: the one not being replaced.
func (d *Daemon) current(namespace, name string) *lifecycle.Instance {
	var found *lifecycle.Instance
	for _, in := range d.machine.Instances() {
		if in.Pod.Namespace == namespace && in.Pod.Name == name {
			found = in // Instances is ordered by creation
		}
	}
	return found
}

// Node implements api.Backend.
func (d *Daemon) Node() (*v1.Node, error) {
	var n *v1.Node
	err := d.do(func() error { n = d.NodeView(); return nil })
	return n, err
}

// Stats implements api.Backend: every running pod's usage from its cgroups.
func (d *Daemon) Stats() ([]api.PodStats, error) {
	var out []api.PodStats
	err := d.do(func() error {
		if d.cgroups.Driver == nil {
			return errors.New("no stats: podvisor runs without cgroups (cgroups.root is empty)")
		}
		for _, in := range d.machine.Instances() {
			if !in.Live() {
				continue
			}
			ps := api.PodStats{Namespace: in.Pod.Namespace, Name: in.Pod.Name, Time: d.now()}
			d.net.watch(in.Pod) // adopted after a restart, or its network attached since
			ps.Net = d.net.read(in.Pod.UID)
			if s, err := d.cgroups.Driver.Stats(d.podCgroup(in.Pod)); err == nil {
				ps.Usage = api.Usage{CPUNanos: s.CPUUsageNanos, MemoryWorkingSet: s.MemoryWorkingSet, Tasks: s.Pids}
			}
			for _, c := range in.AllContainers() {
				if c.Phase != lifecycle.Running {
					continue
				}
				if s, err := d.cgroups.Driver.Stats(d.instanceCgroup(in.Pod, c.Name, c.InstanceID)); err == nil {
					ps.Containers = append(ps.Containers, api.ContainerStats{Name: c.Name,
						Usage: api.Usage{CPUNanos: s.CPUUsageNanos, MemoryWorkingSet: s.MemoryWorkingSet, Tasks: s.Pids}})
				}
			}
			out = append(out, ps)
		}
		return nil
	})
	return out, err
}

// hostIP is the first non-loopback IPv4 address, for status.hostIP.
func hostIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	return ""
}
