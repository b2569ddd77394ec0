package supervisor

import (
	"errors"
	"fmt"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/images"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/nodeprotect"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// localAPI is the daemon's edge for the local API server and the
// command's shutdown drain: each call reads a component that may be read
// from any goroutine, or becomes a request the loop runs on the machine.
type localAPI struct{ d *Daemon }

var _ api.Backend = localAPI{}

// API is what the local API serves from, and what drains the node when
// the machine shuts down.
func (d *Daemon) API() api.Backend { return localAPI{d} }

// Pods implements api.Backend; Assignments passes it on to the hub.
func (a localAPI) Pods() ([]*v1.Pod, uint64, <-chan struct{}) { return a.d.view.Pods() }

// Events implements api.Backend.
func (a localAPI) Events(namespace, name string) []api.Event {
	return a.d.view.Events(namespace, name)
}

// Log implements api.Backend.
func (a localAPI) Log(namespace, name, container string, previous bool) (api.LogRef, error) {
	return a.d.view.Log(namespace, name, container, previous)
}

// Delete implements api.Backend: it terminates a pod instance with an
// optional shorter grace period, or at once with force. A pod whose source
// still asks for it is started again afterwards.
func (a localAPI) Delete(namespace, name string, grace *int64, force bool) (api.DeleteResult, error) {
	d := a.d
	var res api.DeleteResult
	err := d.inbox.do(func() error {
		in := current(d.machine, namespace, name)
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
		res.Recreated = d.desired.Wants(in.Key())
		return d.machine.Delete(in.UID(), g, force, d.now())
	})
	return res, err
}

// SetCondition implements api.Backend for readiness gates.
func (a localAPI) SetCondition(namespace, name string, typ v1.PodConditionType, status bool) error {
	d := a.d
	return d.inbox.do(func() error {
		in := current(d.machine, namespace, name)
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
func current(m *lifecycle.Machine, namespace, name string) *lifecycle.Instance {
	var found *lifecycle.Instance
	for _, in := range m.Instances() {
		if in.Pod.Namespace == namespace && in.Pod.Name == name {
			found = in // Instances is ordered by creation
		}
	}
	return found
}

// Node implements api.Backend: the device as a v1.Node.
func (a localAPI) Node() (*v1.Node, error) {
	d := a.d
	var n *v1.Node
	err := d.inbox.do(func() error {
		annotations := d.probing.NodeAnnotations()
		d.nodeNotes.mu.Lock()
		for k, v := range d.nodeNotes.m {
			annotations[k] = v
		}
		d.nodeNotes.mu.Unlock()
		n = d.protector.NodeView(annotations)
		return nil
	})
	return n, err
}

// nodeNotes are annotations other parts of podvisor put on the node's
// view (the self-update's state), set from their own goroutines.
type nodeNotes struct {
	mu sync.Mutex
	m  map[string]string
}

// SetNodeAnnotation puts key=value on the node's view (an empty value
// removes it); it never waits for the loop.
func (d *Daemon) SetNodeAnnotation(key, value string) {
	d.nodeNotes.mu.Lock()
	defer d.nodeNotes.mu.Unlock()
	if value == "" {
		delete(d.nodeNotes.m, key)
		return
	}
	if d.nodeNotes.m == nil {
		d.nodeNotes.m = map[string]string{}
	}
	d.nodeNotes.m[key] = value
}

// Stats implements api.Backend: every running pod's usage from its cgroups.
func (a localAPI) Stats() ([]api.PodStats, error) {
	d := a.d
	var out []api.PodStats
	err := d.inbox.do(func() error {
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

// Drain implements api.Backend: it stops every pod, lowest priority
// bucket first, and admits nothing until Uncordon. It returns once every
// pod has ended, or the buckets' time is up.
func (a localAPI) Drain(reason string) error {
	d := a.d
	var done <-chan struct{}
	err := d.inbox.do(func() error {
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

// Uncordon implements api.Backend: it ends a drain: pods are admitted
// again, and those the drain stopped run again, as static pods do when a
// node boots after a shutdown. Pods a drain stopped before the daemon
// restarted (which forgot the drain) run again too.
func (a localAPI) Uncordon() error {
	d := a.d
	return d.inbox.do(func() error {
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

// imageManager returns the image component once the daemon runs: API
// requests can arrive while it is still starting.
func (a localAPI) imageManager() (*images.Images, error) {
	var im *images.Images
	err := a.d.inbox.do(func() error { im = a.d.runtimes.Images(); return nil })
	return im, err
}

// Images implements api.Backend.
func (a localAPI) Images() (api.ImageList, error) {
	im, err := a.imageManager()
	if err != nil {
		return api.ImageList{}, err
	}
	imgs, failed, err := im.List()
	if err != nil {
		return api.ImageList{}, err
	}
	var out []api.ImportFailure
	for _, f := range failed {
		out = append(out, api.ImportFailure(f))
	}
	return api.ImageList{Images: imgs, Failed: out}, nil
}

// ImportImage implements api.Backend: it imports an archive on the device
// and lets pods waiting for an image try again at once.
func (a localAPI) ImportImage(path string) ([]string, error) {
	im, err := a.imageManager()
	if err != nil {
		return nil, err
	}
	return im.Import(path)
}

// RemoveImage implements api.Backend.
func (a localAPI) RemoveImage(name string) error {
	im, err := a.imageManager()
	if err != nil {
		return err
	}
	return im.Remove(name)
}

// ExecTarget implements api.Backend: how the CLI runs a command in a
// running container (the pod's first container by default, as kubectl),
// as the container's runtime says.
func (a localAPI) ExecTarget(namespace, name, container string) (api.ExecTarget, error) {
	d := a.d
	var t runtime.ExecTarget
	err := d.inbox.do(func() error {
		in := current(d.machine, namespace, name)
		if in == nil {
			return fmt.Errorf("pod %q not found in namespace %q", name, namespace)
		}
		if container == "" {
			container = in.Pod.Spec.Containers[0].Name
		}
		c := in.Container(container)
		if c == nil {
			return fmt.Errorf("container %q not found in pod %q", container, name)
		}
		if c.Phase != lifecycle.Running {
			return fmt.Errorf("container %q in pod %q is not running", container, name)
		}
		rt, err := d.runtimes.For(in.Pod)
		if err != nil {
			return err
		}
		t, err = rt.ExecTarget(in.Pod, container, c.InstanceID, d.podEnv(in.Pod))
		return err
	})
	return t, err
}
