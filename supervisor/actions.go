package supervisor

import (
	"syscall"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/supervisor/hooks"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podprobes"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtimeset"
)

// execute carries out the core's actions. Starts and hooks run in their own
// goroutines and report back to the loop; everything else is quick.
func (d *Daemon) execute(acts []lifecycle.Action) {
	for _, a := range acts {
		in := d.machine.Instance(a.Pod)
		switch a.Kind {
		case lifecycle.Start:
			d.start(in, a)
		case lifecycle.Signal:
			if err := d.signal(in, a); err != nil {
				d.log.Warn("stop signal", "instance", a.InstanceID, "err", err)
			}
		case lifecycle.Kill:
			if rt := d.runtimes.Of(in.Pod); rt != nil {
				if err := rt.Kill(a.InstanceID); err != nil {
					d.log.Warn("kill", "instance", a.InstanceID, "err", err)
				}
			}
			// Off the loop: the kills of a pod's containers due at once
			// (a grace period's end) happen at once, not one freeze after
			// another.
			go d.cgroups.Killer(d.runtimes.Of(in.Pod), in.Pod, a.Container, a.InstanceID)()
		case lifecycle.RunHook:
			d.hooks.Run(in, a)
		case lifecycle.Probe:
			if t, err := d.hooks.Target(in, a.Container); err == nil {
				d.probing.Start(in.Pod, a.InstanceID, in.Spec(a.Container), t)
			} else {
				d.log.Error("cannot probe", "instance", a.InstanceID, "err", err)
			}
		case lifecycle.Unprobe:
			d.probing.Stop(a.InstanceID, a.Probes...)
		case lifecycle.Forget:
			d.forget(a.Pod)
		case lifecycle.Record:
			d.record(in, a.EventType, a.Reason, a.Message)
			if a.Reason == lifecycle.ReasonPreempted {
				d.metrics.Preempted(a.Resource)
			}
		}
	}
}

// signal sends an instance its stop signal: the one its pod names, else
// its runtime's default for it (0: an image's STOPSIGNAL, else SIGTERM).
func (d *Daemon) signal(in *lifecycle.Instance, a lifecycle.Action) error {
	rt, err := d.runtimes.For(in.Pod)
	if err != nil {
		return err
	}
	var sig syscall.Signal
	if spec := in.Spec(a.Container); spec != nil && spec.Lifecycle != nil && spec.Lifecycle.StopSignal != nil {
		sig = unix.SignalNum(a.Signal)
	}
	return rt.Signal(a.InstanceID, sig)
}

func (d *Daemon) start(in *lifecycle.Instance, a lifecycle.Action) {
	res := runtimeset.Start{Pod: a.Pod, Container: a.Container, InstanceID: a.InstanceID}
	d.containerStarting(in, a)
	rt, err := d.runtimes.For(in.Pod)
	if err != nil {
		// Nothing was created: the container waits with the reason, as
		// the kubelet keeps one its runtime cannot create, and no
		// restart is counted.
		d.runtimes.CannotStart(res, &runtime.CreateError{Reason: "CreateContainerError", Message: err.Error()})
		return
	}
	d.retention.TrimContainer(d.runtimes, in.Pod, a.Container, a.Attempt)
	d.runtimes.Start(rt, d.startRequest(in, a, rt), res)
}

func (d *Daemon) startDone(r runtimeset.Start) {
	for _, e := range r.Events {
		d.record(d.machine.Instance(r.Pod), e.Type, e.Reason, e.Message)
	}
	o := classifyStart(r.Started, r.InstanceID, d.now())
	switch o.Kind {
	case startRan:
		d.execute(d.machine.Started(r.Pod, r.Container, r.InstanceID, r.At))
		d.probing.ContainerStarted(r.Pod)
	case startNotCreated:
		if o.RemoveLeftover {
			d.runtimes.RemoveAfterSave(r.Runtime, r.InstanceID)
		}
		if o.Reason == runtime.ObjectsPending {
			// Quiet, as its status: the objects are on their way.
			d.log.Info("container waits for objects on their way from the hub", "instance", r.InstanceID, "waitingFor", o.Message)
		} else {
			d.log.Warn("container could not be created", "instance", r.InstanceID, "reason", o.Reason, "err", o.Message)
		}
		if o.Reason != runtime.ObjectsPending { // a wait, not an error
			d.startFailed(r.Pod, r.Container, o.Reason)
		}
		d.execute(d.machine.StartFailed(r.Pod, r.Container, r.InstanceID, o.Reason, o.Message, d.now()))
	case startFailed:
		d.log.Warn("container failed to start", "instance", r.InstanceID, "err", r.Err)
		d.startFailed(r.Pod, r.Container, "RunContainerError") // the kubelet's code for a runtime that created but could not start
		d.execute(d.machine.Exited(r.Pod, r.Container, o.Exit))
	}
}

func (d *Daemon) exited(rt runtime.Runtime, x runtime.Exit) {
	uid, name, attempt, ok := vocab.ParseInstanceID(x.InstanceID)
	if !ok {
		return
	}
	withTerminationMessage(d.retention, rt, d.machine.Instance(uid), name, attempt, &x)
	if in := d.machine.Instance(uid); in != nil {
		if x.Signal == 9 && x.Reason == "" && d.cgroups.OOMKilled(d.runtimes.Of(in.Pod), in.Pod, name, x.InstanceID) {
			x.Reason = "OOMKilled"
		}
		if x.Reason == "OOMKilled" {
			d.cgroups.OOMJudged(in.Pod)
		}
	}
	d.log.Info("container exited", "instance", x.InstanceID, "exitCode", x.ExitCode, "reason", x.Reason)
	d.hooks.End(x.InstanceID)
	d.execute(d.machine.Exited(uid, name, x))
	if _, keeps := rt.(runtime.History); !keeps {
		d.runtimes.RemoveAfterSave(rt, x.InstanceID)
	} else if d.machine.Instance(uid) == nil {
		rt.Remove(x.InstanceID) // an orphan from a pod no record knows
	}
	d.retention.TrimDevice(d.runtimes, d.machine)
}

// probed applies what probing reports: a verdict to the machine, a
// listener to the probes it triggers.
func (d *Daemon) probed(rep podprobes.Report) {
	if rep.Listener != nil {
		d.probing.Listened(*rep.Listener, d.machine.Instance)
		return
	}
	r := rep.Result
	uid, name, _, ok := vocab.ParseInstanceID(r.InstanceID)
	if !ok {
		return
	}
	if r.Warning != "" {
		reason := "ProbeWarning"
		if r.Errored {
			reason = "Unhealthy"
		}
		d.record(d.machine.Instance(uid), "Warning", reason, r.Warning)
	}
	if r.WarningOnly {
		return
	}
	if in := d.machine.Instance(uid); in != nil {
		// Which run changed the verdict: a listen event's or the period's.
		run := "period"
		if r.Listen {
			run = "listen event"
		}
		d.log.Info("probe verdict", "pod", in.Key(), "container", name, "probe", r.Kind, "ok", r.OK, "run", run)
	}
	d.execute(d.machine.Probed(uid, name, r.InstanceID, r.Kind, r.OK, r.Message, d.now()))
}

// hookDone applies a hook's end to the machine.
func (d *Daemon) hookDone(r hooks.Result) {
	if r.Warning != "" {
		d.record(d.machine.Instance(r.Pod), "Warning", "LifecycleHTTPFallback", r.Warning)
	}
	if r.Err != nil {
		d.log.Warn("hook failed", "instance", r.InstanceID, "hook", r.Hook, "err", r.Err)
	}
	d.execute(d.machine.HookDone(r.Pod, r.Container, r.InstanceID, r.Hook, r.Err, d.now()))
}

// forget removes everything left of a terminated, undesired pod instance.
func (d *Daemon) forget(uid types.UID) {
	d.probing.Unwatch(uid)
	d.cgroups.RemovePod(uid)
	d.runtimes.ForgetPod(uid)
	d.podFS.RemovePod(uid)
	d.retention.RemovePodLogs(uid)
}
