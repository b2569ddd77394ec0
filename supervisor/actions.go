package supervisor

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/podprobes"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/sandbox"
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
			if rt := d.runtimeOf(in.Pod); rt != nil {
				if err := rt.Kill(a.InstanceID); err != nil {
					d.log.Warn("kill", "instance", a.InstanceID, "err", err)
				}
			}
			d.cgroups.Kill(d.runtimeOf(in.Pod), in.Pod, a.Container, a.InstanceID)
		case lifecycle.RunHook:
			d.runHook(in, a)
		case lifecycle.Probe:
			if t, err := d.target(in, a.Container); err == nil {
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

// target is what probes and hooks need to act on a container: commands
// run inside it and connections are made from inside its pod's network
// where its runtime gives it its own.
func (d *Daemon) target(in *lifecycle.Instance, container string) (probes.Target, error) {
	spec := in.Spec(container)
	p, err := runtime.Resolve(in.Pod, spec, d.node)
	if err != nil {
		return probes.Target{}, err
	}
	t := probes.Target{Host: "127.0.0.1", Ports: spec.Ports, Env: p.Env, Dir: p.Dir, UID: p.UID, GID: p.GID}
	if ic, ok := d.runtimeOf(in.Pod).(runtime.InContainer); ok {
		id := in.Container(container).InstanceID
		if netns := ic.NetNS(in.Pod); netns != "" {
			t.DialIn = func(ctx context.Context, d *net.Dialer, network, addr string) (net.Conn, error) {
				return sandbox.DialContext(ctx, d, netns, network, addr)
			}
		}
		t.ExecIn = func(_ context.Context, command []string, timeout time.Duration) (int, string, error) {
			return ic.Exec(id, command, timeout)
		}
	}
	return t, nil
}

type hookResult struct {
	pod        types.UID
	container  string
	instanceID string
	hook       lifecycle.HookKind
	err        error
	warning    string // the LifecycleHTTPFallback event's text, if any
}

func (d *Daemon) runHook(in *lifecycle.Instance, a lifecycle.Action) {
	spec := in.Spec(a.Container)
	h := spec.Lifecycle.PostStart
	if a.Hook == lifecycle.PreStop {
		h = spec.Lifecycle.PreStop
	}
	t, err := d.target(in, a.Container)
	res := hookResult{pod: a.Pod, container: a.Container, instanceID: a.InstanceID, hook: a.Hook}
	if err != nil {
		res.err = err
		d.hooks <- res
		return
	}
	// A zero timeout is none (the kubelet sets none on exec hooks): the
	// hook then ends with its container instance.
	timeout := a.Timeout
	if timeout <= 0 {
		timeout = noHookTimeout
	}
	ctx, cancel := context.WithCancel(context.Background())
	if d.hookCancels == nil {
		d.hookCancels = map[string][]context.CancelFunc{}
	}
	d.hookCancels[a.InstanceID] = append(d.hookCancels[a.InstanceID], cancel)
	go func() {
		res.warning, res.err = probes.Hook(ctx, t, h, timeout)
		d.hooks <- res
	}()
}

// noHookTimeout stands for "no timeout" where a duration is needed.
const noHookTimeout = 100 * 365 * 24 * time.Hour

// endHooks cancels the hooks still running for a container instance that
// is gone.
func (d *Daemon) endHooks(instanceID string) {
	for _, cancel := range d.hookCancels[instanceID] {
		cancel()
	}
	delete(d.hookCancels, instanceID)
}

func (d *Daemon) start(in *lifecycle.Instance, a lifecycle.Action) {
	res := startResult{pod: a.Pod, container: a.Container, instanceID: a.InstanceID}
	rt, err := d.runtimes.For(in.Pod)
	if err != nil {
		// Nothing was created: the container waits with the reason, as
		// the kubelet keeps one its runtime cannot create, and no
		// restart is counted.
		res.Err = &runtime.CreateError{Reason: "CreateContainerError", Message: err.Error()}
		d.started <- res
		return
	}
	res.rt = rt
	d.gcContainer(in.Pod, a.Container, a.Attempt)
	rt.Start(d.startRequest(in, a, rt), func(s runtime.Started) {
		res.Started = s
		d.started <- res
	})
}

func (d *Daemon) startDone(r startResult) {
	o := classifyStart(r.Started, r.instanceID, d.now())
	switch o.Kind {
	case startRan:
		d.execute(d.machine.Started(r.pod, r.container, r.instanceID, r.At))
		d.probing.ContainerStarted(r.pod)
	case startNotCreated:
		if o.RemoveLeftover {
			d.removeAfterSave(r.rt, r.instanceID)
		}
		d.log.Warn("container could not be created", "instance", r.instanceID, "reason", o.Reason, "err", o.Message)
		d.execute(d.machine.StartFailed(r.pod, r.container, r.instanceID, o.Reason, o.Message, d.now()))
	case startFailed:
		d.log.Warn("container failed to start", "instance", r.instanceID, "err", r.Err)
		d.execute(d.machine.Exited(r.pod, r.container, o.Exit))
	}
}

func (d *Daemon) exited(rt runtime.Runtime, x runtime.Exit) {
	uid, name, attempt, ok := vocab.ParseInstanceID(x.InstanceID)
	if !ok {
		return
	}
	d.withTerminationMessage(rt, d.machine.Instance(uid), name, attempt, &x)
	if in := d.machine.Instance(uid); in != nil {
		if x.Signal == 9 && x.Reason == "" && d.cgroups.OOMKilled(d.runtimeOf(in.Pod), in.Pod, name, x.InstanceID) {
			x.Reason = "OOMKilled"
		}
		if x.Reason == "OOMKilled" {
			d.cgroups.OOMJudged(in.Pod)
		}
	}
	d.log.Info("container exited", "instance", x.InstanceID, "exitCode", x.ExitCode, "reason", x.Reason)
	d.endHooks(x.InstanceID)
	d.execute(d.machine.Exited(uid, name, x))
	if _, keeps := rt.(runtime.History); !keeps {
		d.removeAfterSave(rt, x.InstanceID)
	} else if d.machine.Instance(uid) == nil {
		rt.Remove(x.InstanceID) // an orphan from a pod no record knows
	}
	d.gcDevice()
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
		d.record(d.machine.Instance(uid), "Warning", "ProbeWarning", r.Warning)
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

func (d *Daemon) hookDone(r hookResult) {
	if r.warning != "" {
		d.record(d.machine.Instance(r.pod), "Warning", "LifecycleHTTPFallback", r.warning)
	}
	if r.err != nil {
		d.log.Warn("hook failed", "instance", r.instanceID, "hook", r.hook, "err", r.err)
	}
	d.execute(d.machine.HookDone(r.pod, r.container, r.instanceID, r.hook, r.err, d.now()))
}

// logPath is where a container instance logs, as the kubelet lays out
// /var/log/pods: one directory per pod, one per container, one file per
// attempt.
func (d *Daemon) logPath(pod *v1.Pod, container string, attempt int) string {
	return filepath.Join(d.podLogDir(pod), container, strconv.Itoa(attempt)+".log")
}

func (d *Daemon) podLogDir(pod *v1.Pod) string {
	return filepath.Join(d.cfg.DataDir, "logs", fmt.Sprintf("%s_%s_%s", pod.Namespace, pod.Name, pod.UID))
}

// kept lists the instances the runtimes keep whose IDs start with
// prefix, with the runtime that keeps each.
func (d *Daemon) kept(prefix string) ([]runtime.Kept, map[string]runtime.Runtime) {
	var all []runtime.Kept
	owner := map[string]runtime.Runtime{}
	for _, rt := range d.runtimes.All() {
		if h, ok := rt.(runtime.History); ok {
			for _, k := range h.Kept(prefix) {
				all = append(all, k)
				owner[k.InstanceID] = rt
			}
		}
	}
	return all, owner
}

// gcContainer keeps the instance directories and logs of the attempt about
// to start and of the MaxDeadPerContainer attempts before it.
func (d *Daemon) gcContainer(pod *v1.Pod, container string, attempt int) {
	keepFrom := attempt - d.cfg.MaxDeadPerContainer
	kept, owner := d.kept(fmt.Sprintf("%s_%s_", pod.UID, container))
	for _, id := range staleInstances(kept, keepFrom) {
		if err := owner[id].Remove(id); err != nil {
			d.log.Warn("removing old instance", "instance", id, "err", err)
		}
	}
	logs, _ := filepath.Glob(filepath.Join(d.podLogDir(pod), container, "*.log*"))
	for _, l := range staleLogs(logs, keepFrom) {
		os.Remove(l)
	}
}

// gcDevice keeps at most MaxDeadContainers finished instances on the
// device (deviceGCCandidates).
func (d *Daemon) gcDevice() {
	if d.cfg.MaxDeadContainers <= 0 {
		return
	}
	kept, owner := d.kept("")
	candidates, excess := deviceGCCandidates(kept, d.cfg.MaxDeadContainers)
	for _, x := range candidates {
		if excess <= 0 {
			break
		}
		if err := owner[x.InstanceID].Remove(x.InstanceID); err == nil {
			excess--
			uid, name, n, _ := vocab.ParseInstanceID(x.InstanceID)
			if in := d.machine.Instance(uid); in != nil {
				os.Remove(d.logPath(in.Pod, name, n))
			}
		}
	}
}

// forget removes everything left of a terminated, undesired pod instance.
func (d *Daemon) forget(uid types.UID) {
	d.probing.Unwatch(uid)
	d.cgroups.RemovePod(uid)
	d.forgetPod(uid)
	d.podFS.RemovePod(uid)
	logDirs, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "logs", "*_"+string(uid)))
	for _, dir := range logDirs {
		os.RemoveAll(dir)
	}
}
