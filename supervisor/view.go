package supervisor

import (
	"errors"
	"fmt"
	"net"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podview"
)

// StatusInvalid is the STATUS of a manifest file that was rejected.
const StatusInvalid = podview.StatusInvalid

// record logs an event about a pod instance and keeps it for describe.
func (d *Daemon) record(in *lifecycle.Instance, typ, reason, msg string) {
	if in == nil {
		return
	}
	d.addEvent(podview.Note{Key: in.Key(), Type: typ, Reason: reason, Message: msg})
}

// addEvent logs an event, queues it for the hub and keeps it for describe.
func (d *Daemon) addEvent(n podview.Note) {
	if n.Type == "Warning" {
		d.log.Warn(n.Message, "pod", n.Key, "reason", n.Reason)
	} else {
		d.log.Info(n.Message, "pod", n.Key, "reason", n.Reason)
	}
	now := d.now()
	d.desired.QueueEvent(PodEvent{Pod: n.Key, Time: now, Type: n.Type, Reason: n.Reason, Message: n.Message})
	d.view.Record(n, now)
}

// Pods implements api.Backend; Assignments passes it on to the hub.
func (d *Daemon) Pods() ([]*v1.Pod, uint64, <-chan struct{}) { return d.view.Pods() }

// Events implements api.Backend.
func (d *Daemon) Events(namespace, name string) []api.Event { return d.view.Events(namespace, name) }

// Log implements api.Backend.
func (d *Daemon) Log(namespace, name, container string, previous bool) (api.LogRef, error) {
	return d.view.Log(namespace, name, container, previous)
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
		res.Recreated = d.desired.FileWants(in.Key())
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
			ps.Net = d.probing.NetStats(in.Pod) // counted from now if adopted after a restart, or its network attached since
			if s, err := d.cgroups.Driver.Stats(d.cgroups.PodCgroup(in.Pod)); err == nil {
				ps.Usage = api.Usage{CPUNanos: s.CPUUsageNanos, MemoryWorkingSet: s.MemoryWorkingSet, Tasks: s.Pids}
			}
			for _, c := range in.AllContainers() {
				if c.Phase != lifecycle.Running {
					continue
				}
				if s, err := d.cgroups.Driver.Stats(d.cgroups.InstanceCgroup(d.runtimes.Of(in.Pod), in.Pod, c.Name, c.InstanceID)); err == nil {
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
