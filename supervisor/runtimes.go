package supervisor

import (
	"fmt"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
	"github.com/podvisor/podvisor/supervisor/runtime/process"
)

// ContainerdConfig is how pods without runtimeClassName process run.
type ContainerdConfig = containerd.Config

// ImageGC are the image garbage collection thresholds.
type ImageGC = containerd.ImageGC

// ManagedContainerd is a containerd podvisor runs itself.
type ManagedContainerd = containerd.Managed

// runtimeExit is an exit with the runtime that reported it.
type runtimeExit struct {
	rt   runtime.Runtime
	exit runtime.Exit
}

// removal is a finished instance to remove once its end is saved.
type removal struct {
	rt runtime.Runtime
	id string
}

// setupRuntimes registers the process runtime and, when configured,
// containerd (which also runs pods that name no runtime class), and
// gathers their exits and reconnections for the loop until forwarding
// ends: after stop, when the daemon may still stop every pod. It returns
// what to do when the daemon stops.
func (d *Daemon) setupRuntimes(stop, forwarding <-chan struct{}) (closeAll func(), err error) {
	if d.runtimes != nil { // given (tests)
		d.watchRuntimes(forwarding)
		return func() {}, nil
	}
	d.runtimes = runtime.NewRegistry(containerd.Name)
	proc, err := process.New(filepath.Join(d.cfg.DataDir, "containers"), d.cfg.ShimCommand, d.cgroups.Cgroups, d.log)
	if err != nil {
		return nil, err
	}
	if d.cfg.ProcessKeeper {
		if err := proc.EnableKeeper(); err != nil {
			return nil, err
		}
	}
	d.runtimes.Register(manifest.ProcessRuntimeClass, proc)
	closeAll = func() {}
	if cc := d.cfg.Containerd; cc.Configured() {
		ctr := containerd.New(cc, d.cfg.DataDir, d.cgroups.Cgroups, d.log)
		if err := ctr.Launch(stop); err != nil {
			return nil, err
		}
		d.runtimes.Register(containerd.Name, ctr)
		closeAll = ctr.Close
	} else {
		d.runtimes.Unavailable(containerd.Name, containerd.ErrNotConfigured.Error()+"; set runtimeClassName: process to run host processes")
	}
	d.watchRuntimes(forwarding)
	return closeAll, nil
}

// watchRuntimes forwards every runtime's exits and reconnections to the
// loop, and finds the runtime that keeps images.
func (d *Daemon) watchRuntimes(stop <-chan struct{}) {
	for _, rt := range d.runtimes.All() {
		go func() {
			for {
				select {
				case x := <-rt.Exits():
					d.exits <- runtimeExit{rt, x}
				case <-stop:
					return
				}
			}
		}()
		if rc, ok := rt.(runtime.Reconnecting); ok {
			go func() {
				for {
					select {
					case <-rc.Connected():
						d.reconnected <- rt
					case <-stop:
						return
					}
				}
			}()
		}
		if is, ok := rt.(imageStore); ok && d.images == nil {
			d.images = is
		}
	}
}

// runtimeOf is the runtime of a pod, or nil (its pods cannot start).
func (d *Daemon) runtimeOf(pod *v1.Pod) runtime.Runtime {
	rt, _ := d.runtimes.For(pod)
	return rt
}

// recoverRuntime reconciles what a runtime that reconnects holds with the
// records, at every (re)connection. Instances of current records are
// adopted and followed (an exit that happened meanwhile arrives at once);
// superseded or unknown ones are killed and removed; a record whose
// instance is gone ends as ContainerStatusUnknown. Instances this daemon
// already follows are left alone, so it is idempotent.
func (d *Daemon) recoverRuntime(rt runtime.Runtime) {
	rc := rt.(runtime.Reconnecting)
	found, err := rt.Recover()
	if err != nil {
		// Adoption must not be skipped: try again shortly.
		d.log.Error("listing a runtime's containers; retrying in 1s", "err", err)
		time.AfterFunc(time.Second, func() {
			select {
			case d.recoverRetry <- rt:
			default:
			}
		})
		return
	}
	now := d.now()
	present := map[string]bool{}
	for _, f := range found {
		id := f.InstanceID
		present[id] = true
		uid, name := f.PodUID, f.Container
		in := d.machine.Instance(uid)
		var c *lifecycle.Container
		if in != nil {
			c = in.Container(name)
		}
		switch reconnectInstance(f, c) {
		case recoverOrphan:
			d.log.Warn("killing a container no record knows", "instance", id)
			d.machine.RestoreOrphan(uid, f.PodNamespace, f.PodName, name, id, f.Attempt, now)
			rc.Follow(id)
		case recoverRemove:
			d.removeAfterSave(rt, id)
		case recoverAdopt:
			d.machine.SawAttempt(uid, name, f.Attempt)
			d.log.Info("adopted running container", "pod", in.Key(), "container", name, "instance", id, "runtime", d.runtimes.ClassOf(in.Pod))
			// Followed first: the probes Adopted starts must aim inside it.
			rc.Follow(id)
			d.execute(d.machine.Adopted(uid, name, id, f.Attempt, f.StartedAt))
		case recoverKillSuperseded:
			d.machine.SawAttempt(uid, name, f.Attempt)
			d.log.Warn("stopping a superseded container", "instance", id)
			rc.Follow(id)
			rt.Kill(id)
		case recoverDiscard:
			d.machine.SawAttempt(uid, name, f.Attempt)
			present[id] = false
			d.removeAfterSave(rt, id)
		}
	}
	for _, in := range d.machine.Instances() {
		if d.runtimeOf(in.Pod) != rt {
			continue
		}
		for _, c := range in.AllContainers() {
			if present[c.InstanceID] || c.Phase != lifecycle.Running || rc.Follows(c.InstanceID) {
				continue
			}
			d.execute(d.machine.Exited(in.UID(), c.Name, runtime.Unlocated(c.InstanceID, now)))
		}
	}
}

// removeAfterSave removes a finished instance once its end is saved:
// kept until then, a daemon that dies in between still learns its exit
// code from the runtime.
func (d *Daemon) removeAfterSave(rt runtime.Runtime, id string) {
	d.removals = append(d.removals, removal{rt, id})
}

// flushRemovals removes the queued instances; it runs once nothing is
// left unsaved.
func (d *Daemon) flushRemovals() {
	if len(d.removals) == 0 {
		return
	}
	batch := d.removals
	d.removals = nil
	go func() {
		for _, r := range batch {
			if err := r.rt.Remove(r.id); err != nil {
				d.log.Warn("removing a finished container", "instance", r.id, "err", err)
			}
		}
	}()
}

// forgetPod removes what every runtime keeps of a pod that is gone.
func (d *Daemon) forgetPod(uid types.UID) {
	for _, rt := range d.runtimes.All() {
		rt.ForgetPod(uid)
	}
}

// startRequest prepares a container instance for its runtime.
func (d *Daemon) startRequest(in *lifecycle.Instance, a lifecycle.Action, rt runtime.Runtime) *runtime.Container {
	pod, spec := in.Pod, in.Spec(a.Container)
	return &runtime.Container{
		Pod: pod, Spec: spec, InstanceID: a.InstanceID, Attempt: a.Attempt, Node: d.node,
		LogPath: d.logPath(pod, a.Container, a.Attempt), LogMaxBytes: d.cfg.LogMaxBytes, LogMaxFiles: d.cfg.LogMaxFiles,
		OOMScoreAdj: resources.OOMScoreAdj(pod, spec, d.protector.Memory()),
		Cgroup: func() (string, error) {
			if d.cgroups.Driver == nil {
				return "", nil
			}
			if err := d.cgroups.EnsurePod(pod); err != nil {
				return "", err
			}
			d.listen.watch(pod) // before the container starts: its listen() is seen
			d.net.watch(pod)    // and its first packet counted
			return d.cgroups.InstanceStarting(rt, pod, a.Container, a.InstanceID), nil
		},
		Mounts:      d.podFS.MountsFor(pod, spec, d.node),
		LocalImages: d.cfg.Policy.LocalImages(pod),
	}
}

// ExecTarget implements api.Backend: how the CLI runs a command in a
// running container (the pod's first container by default, as kubectl),
// as the container's runtime says.
func (d *Daemon) ExecTarget(namespace, name, container string) (api.ExecTarget, error) {
	var t runtime.ExecTarget
	err := d.do(func() error {
		in := d.current(namespace, name)
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
		t, err = rt.ExecTarget(in.Pod, container, c.InstanceID, d.node)
		return err
	})
	return t, err
}
