package supervisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
	"github.com/podvisor/podvisor/supervisor/runtime/process"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
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
			sig := unix.SignalNum(a.Signal)
			if sig == 0 {
				sig = unix.SIGTERM
			}
			var err error
			if d.onContainerd(a.InstanceID) {
				err = d.ctrdSignal(in, a)
			} else {
				err = d.rt.Signal(a.InstanceID, sig)
			}
			if err != nil {
				d.log.Warn("stop signal", "instance", a.InstanceID, "err", err)
			}
		case lifecycle.Kill:
			kill := d.rt.Kill
			if d.onContainerd(a.InstanceID) {
				kill = func(id string) error { return d.ctrd.Kill(containerd.ContainerID(id)) }
			}
			if err := kill(a.InstanceID); err != nil {
				d.log.Warn("kill", "instance", a.InstanceID, "err", err)
			}
			d.killCgroup(in, a.Container, a.InstanceID)
		case lifecycle.RunHook:
			d.runHook(in, a)
		case lifecycle.Probe:
			if t, err := d.target(in, a.Container); err == nil {
				d.probes.Start(a.InstanceID, in.Spec(a.Container), t)
			} else {
				d.log.Error("cannot probe", "instance", a.InstanceID, "err", err)
			}
		case lifecycle.Unprobe:
			d.probes.Stop(a.InstanceID, a.Probes...)
		case lifecycle.Forget:
			d.forget(a.Pod)
		case lifecycle.Record:
			d.record(in, a.EventType, a.Reason, a.Message)
		}
	}
}

// target is what probes and hooks need to act on a container.
func (d *Daemon) target(in *lifecycle.Instance, container string) (probes.Target, error) {
	spec := in.Spec(container)
	s, err := process.BuildSpec(in.Pod, spec, d.node)
	if err != nil {
		return probes.Target{}, err
	}
	t := probes.Target{Host: "127.0.0.1", Ports: spec.Ports, Env: s.Env, Dir: s.Dir, UID: s.UID, GID: s.GID}
	if id := in.Container(container).InstanceID; d.onContainerd(id) {
		d.ctrdTarget(in, id, &t)
	}
	return t, nil
}

type hookResult struct {
	pod        types.UID
	container  string
	instanceID string
	hook       lifecycle.HookKind
	err        error
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
		res.err = probes.Hook(ctx, t, h, timeout)
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
	pod := in.Pod
	res := startResult{pod: a.Pod, container: a.Container, instanceID: a.InstanceID}
	if !isProcessPod(pod) {
		d.startContainerd(in, a, res)
		return
	}
	s, err := process.BuildSpec(pod, in.Spec(a.Container), d.node)
	if err != nil {
		res.err = err
		d.started <- res
		return
	}
	place, err := d.placeContainer(pod, in.Spec(a.Container), &s)
	if err != nil {
		res.err = err
		d.started <- res
		return
	}
	s.InstanceID, s.Attempt = a.InstanceID, a.Attempt
	s.TerminationLog = in.Spec(a.Container).TerminationMessagePath != ""
	s.LogPath = d.logPath(pod, a.Container, a.Attempt)
	s.LogMaxBytes, s.LogMaxFiles = d.cfg.LogMaxBytes, d.cfg.LogMaxFiles
	d.gcContainer(pod, a.Container, a.Attempt)
	go func() {
		res.at, res.err = d.rt.StartPlaced(s, place)
		d.started <- res
	}()
}

func (d *Daemon) startDone(r startResult) {
	d.networkDone(r.pod, r.network)
	if d.onContainerd(r.instanceID) {
		switch {
		case r.err != nil:
			// The plugin could not be asked, or died answering: the
			// container may exist, so it goes once its end is saved.
			// The start failed before anything ran: the container
			// waits with RunContainerError, as the kubelet shows a
			// failed StartContainer call, and no restart is counted.
			d.removeCtrd(r.instanceID)
			d.log.Warn("container could not be started", "instance", r.instanceID, "err", r.err)
			d.execute(d.machine.StartFailed(r.pod, r.container, r.instanceID, "RunContainerError", r.err.Error(), d.now()))
			return
		case r.failure != nil && r.failure.Reason == containerd.StartError:
			delete(d.onCtrd, r.instanceID) // the plugin removed it
			r.err = errors.New(r.failure.Message)
		case r.failure != nil:
			delete(d.onCtrd, r.instanceID)
			d.log.Warn("container could not be created", "instance", r.instanceID, "reason", r.failure.Reason, "err", r.failure.Message)
			d.execute(d.machine.StartFailed(r.pod, r.container, r.instanceID, r.failure.Reason, r.failure.Message, d.now()))
			return
		default:
			d.onCtrd[r.instanceID] = r.stopSignal
			if r.imageRef != "" {
				d.imageRefs[r.instanceID] = r.imageRef
			}
		}
	} else if r.failure != nil {
		// Refused before any runtime was asked (configuration).
		d.execute(d.machine.StartFailed(r.pod, r.container, r.instanceID, r.failure.Reason, r.failure.Message, d.now()))
		return
	}
	if r.err != nil {
		d.log.Warn("container failed to start", "instance", r.instanceID, "err", r.err)
		now := d.now()
		d.execute(d.machine.Exited(r.pod, r.container, lifecycle.Termination{
			InstanceID: r.instanceID, ExitCode: 128, Reason: "StartError", Message: r.err.Error(),
			StartedAt: now, FinishedAt: now}))
		return
	}
	d.execute(d.machine.Started(r.pod, r.container, r.instanceID, r.at))
}

func (d *Daemon) exited(x process.Exit) {
	uid, name, attempt, ok := parseInstanceID(x.InstanceID)
	if !ok {
		return
	}
	st := x.Status
	d.withTerminationMessage(d.machine.Instance(uid), name, x.InstanceID, attempt, &st)
	if st.Signal == 9 && st.Reason == "" && d.oomKilled(d.machine.Instance(uid), name, x.InstanceID) {
		st.Reason = "OOMKilled"
	}
	if st.Reason == "OOMKilled" {
		d.oomJudged(d.machine.Instance(uid))
	}
	d.log.Info("container exited", "instance", x.InstanceID, "exitCode", st.ExitCode, "reason", st.Reason)
	d.endHooks(x.InstanceID)
	d.execute(d.machine.Exited(uid, name, termination(x.InstanceID, st)))
	if d.onContainerd(x.InstanceID) {
		d.removeCtrd(x.InstanceID)
	} else if d.machine.Instance(uid) == nil {
		d.rt.Remove(x.InstanceID) // an orphan from a pod no record knows
	}
	d.gcDevice()
}

func (d *Daemon) probed(r probes.Result) {
	uid, name, _, ok := parseInstanceID(r.InstanceID)
	if !ok {
		return
	}
	if r.Warning != "" {
		d.record(d.machine.Instance(uid), "Warning", "ProbeWarning", r.Warning)
	}
	if r.WarningOnly {
		return
	}
	d.execute(d.machine.Probed(uid, name, r.InstanceID, r.Kind, r.OK, r.Message, d.now()))
}

func (d *Daemon) hookDone(r hookResult) {
	if r.err != nil {
		d.log.Warn("hook failed", "instance", r.instanceID, "hook", r.hook, "err", r.err)
	}
	d.execute(d.machine.HookDone(r.pod, r.container, r.instanceID, r.hook, r.err, d.now()))
}

func termination(id string, st shim.ExitStatus) lifecycle.Termination {
	return lifecycle.Termination{InstanceID: id, ExitCode: st.ExitCode, Signal: st.Signal, Reason: st.Reason,
		Message: st.Message, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
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

// gcContainer keeps the instance directories and logs of the attempt about
// to start and of the MaxDeadPerContainer attempts before it.
func (d *Daemon) gcContainer(pod *v1.Pod, container string, attempt int) {
	keepFrom := attempt - d.cfg.MaxDeadPerContainer
	dirs, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "containers", fmt.Sprintf("%s_%s_*", pod.UID, container)))
	for _, dir := range dirs {
		if _, _, n, ok := parseInstanceID(filepath.Base(dir)); ok && n < keepFrom {
			if err := d.rt.Remove(filepath.Base(dir)); err != nil {
				d.log.Warn("removing old instance", "dir", dir, "err", err)
			}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(d.podLogDir(pod), container, "*.log*"))
	for _, l := range logs {
		base := filepath.Base(l)
		n, err := strconv.Atoi(base[:strings.Index(base, ".")])
		if err == nil && n < keepFrom {
			os.Remove(l)
		}
	}
}

// gcDevice keeps at most MaxDeadContainers finished instances on the
// device, removing the oldest first, but never the newest finished instance
// of a container (what its status and logs show).
func (d *Daemon) gcDevice() {
	if d.cfg.MaxDeadContainers <= 0 {
		return
	}
	type dead struct {
		id       string
		finished int64
	}
	var all []dead
	exits, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "containers", "*", shim.ExitFile))
	if len(exits) <= d.cfg.MaxDeadContainers {
		return
	}
	newest := map[string]string{} // uid_container -> instance with the highest attempt
	for _, e := range exits {
		id := filepath.Base(filepath.Dir(e))
		st, err := os.Stat(e)
		if err != nil {
			continue
		}
		all = append(all, dead{id, st.ModTime().UnixNano()})
		if uid, name, n, ok := parseInstanceID(id); ok {
			key := string(uid) + "_" + name
			if _, _, m, _ := parseInstanceID(newest[key]); newest[key] == "" || n > m {
				newest[key] = id
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].finished < all[j].finished })
	keep := map[string]bool{}
	for _, id := range newest {
		keep[id] = true
	}
	excess := len(all) - d.cfg.MaxDeadContainers
	for _, x := range all {
		if excess <= 0 {
			break
		}
		if keep[x.id] {
			continue
		}
		uid, name, n, _ := parseInstanceID(x.id)
		if err := d.rt.Remove(x.id); err == nil {
			excess--
			if in := d.machine.Instance(uid); in != nil {
				os.Remove(d.logPath(in.Pod, name, n))
			}
		}
	}
}

// forget removes everything left of a terminated, undesired pod instance.
func (d *Daemon) forget(uid types.UID) {
	d.removeCgroups(uid)
	d.removeSandbox(uid)
	dirs, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "containers", string(uid)+"_*"))
	for _, dir := range dirs {
		if err := d.rt.Remove(filepath.Base(dir)); err != nil {
			d.log.Warn("removing instance", "dir", dir, "err", err)
		}
	}
	logDirs, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "logs", "*_"+string(uid)))
	for _, dir := range logDirs {
		os.RemoveAll(dir)
	}
}

// parseInstanceID splits "<uid>_<container>_<attempt>".
func parseInstanceID(id string) (types.UID, string, int, bool) {
	last := strings.LastIndexByte(id, '_')
	if last < 0 {
		return "", "", 0, false
	}
	first := strings.IndexByte(id, '_')
	if first == last {
		return "", "", 0, false
	}
	n, err := strconv.Atoi(id[last+1:])
	if err != nil {
		return "", "", 0, false
	}
	return types.UID(id[:first]), id[first+1 : last], n, true
}
