package supervisor

import (
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/images"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// setupRuntimes makes the runtimes the configuration chooses (the
// default one also runs pods that name no runtime class), and gathers
// their exits and reconnections for the loop until forwarding ends: after
// stop, when the daemon may still stop every pod. It gives the image
// component the runtime that keeps images. It returns what to do when the
// daemon stops.
func (d *Daemon) setupRuntimes(stop, forwarding <-chan struct{}) (closeAll func(), err error) {
	closeAll = func() {}
	if d.runtimes.Registry == nil { // else given (tests)
		env := runtime.Env{DataDir: d.cfg.DataDir, Cgroups: d.cgroups.Cgroups, Log: d.log, Stop: stop}
		if closeAll, err = d.runtimes.Setup(env); err != nil {
			return nil, err
		}
	}
	d.runtimes.WatchWithImages(forwarding, images.Options{Dir: filepath.Join(d.cfg.DataDir, "images"), Log: d.log,
		Settle: 500 * time.Millisecond})
	return closeAll, nil
}

// admitter is the core's admission decision: the pod's runtime first
// (runtime.HostAdmitter: what this host lacks for the pod now, asked
// again every hostRecheck), then node (the node's resources and
// pressure), so that no pod is preempted for one that could not start
// anyway.
func (d *Daemon) admitter(node lifecycle.AdmitFunc) lifecycle.AdmitFunc {
	return func(candidate *v1.Pod, held []*v1.Pod) lifecycle.Admission {
		if rt, err := d.runtimes.For(candidate); err == nil {
			if ha, ok := rt.(runtime.HostAdmitter); ok {
				if reason, msg := ha.AdmitPod(candidate); reason != "" {
					return lifecycle.Admission{Reason: reason, Message: msg, Recheck: hostRecheck}
				}
			}
		}
		return node(candidate, held)
	}
}

// hostRecheck is how often a pod the host lacks something for is asked
// about again: an operator who makes the missing path sees it start.
const hostRecheck = 10 * time.Second

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
		d.runtimes.RecoverLater(rt)
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
			d.runtimes.RemoveAfterSave(rt, id)
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
			d.runtimes.RemoveAfterSave(rt, id)
		}
	}
	for _, in := range d.machine.Instances() {
		if d.runtimes.Of(in.Pod) != rt {
			continue
		}
		for _, c := range in.AllContainers() {
			if present[c.InstanceID] || c.Phase != lifecycle.Running || rc.Follows(c.InstanceID) {
				continue
			}
			d.execute(d.machine.Exited(in.UID(), c.Name, runtime.Unlocated(c.InstanceID, now)))
		}
	}
	d.runtimeAdopted(rt)
}

// startRequest prepares a container instance for its runtime.
func (d *Daemon) startRequest(in *lifecycle.Instance, a lifecycle.Action, rt runtime.Runtime) *runtime.Container {
	pod, spec := in.Pod, in.Spec(a.Container)
	env := d.podEnv(pod)
	return &runtime.Container{
		Pod: pod, Spec: spec, InstanceID: a.InstanceID, Attempt: a.Attempt, Node: env,
		LogPath: d.retention.LogPath(pod, a.Container, a.Attempt), LogMaxBytes: d.cfg.Logs.MaxSize.Value(), LogMaxFiles: d.cfg.Logs.MaxFiles,
		OOMScoreAdj: resources.OOMScoreAdj(pod, spec, d.protector.Memory()),
		Cgroup: func() (string, error) {
			if d.cgroups.Driver == nil {
				return "", nil
			}
			if err := d.cgroups.EnsurePod(pod); err != nil {
				return "", err
			}
			d.probing.Watch(pod) // before the container starts: its listen() is seen and its first packet counted
			return d.cgroups.InstanceStarting(rt, pod, a.Container, a.InstanceID), nil
		},
		Mounts:       d.podFS.MountsFor(pod, spec, env),
		VolumeMounts: d.podFS.VolumeMountsFor(pod, spec, env),
		LocalImages:  d.desired.LocalImages(pod),
	}
}
