package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/manifest"
	"github.com/podvisor/podvisor/supervisor/runtime/process"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// execute carries out the core's actions. Starts run in their own goroutine
// and report back on d.started; everything else is quick.
func (d *Daemon) execute(acts []lifecycle.Action) {
	for _, a := range acts {
		in := d.machine.Instance(a.Pod)
		switch a.Kind {
		case lifecycle.Start:
			d.start(in, a)
		case lifecycle.Stop:
			if err := d.rt.Signal(a.InstanceID, syscall.SIGTERM); err != nil {
				d.log.Warn("stop", "instance", a.InstanceID, "err", err)
			}
		case lifecycle.Kill:
			d.record(in, "Warning", "Killing", "Grace period expired: killing container "+a.Container)
			if err := d.rt.Kill(a.InstanceID); err != nil {
				d.log.Warn("kill", "instance", a.InstanceID, "err", err)
			}
		case lifecycle.Forget:
			d.forget(a.Pod)
		case lifecycle.Record:
			d.record(in, a.EventType, a.Reason, a.Message)
		}
	}
}

func (d *Daemon) start(in *lifecycle.Instance, a lifecycle.Action) {
	pod := in.Pod
	var spec *v1.Container
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == a.Container {
			spec = &pod.Spec.Containers[i]
		}
	}
	res := startResult{pod: a.Pod, container: a.Container, instanceID: a.InstanceID}
	if rc := pod.Spec.RuntimeClassName; rc == nil || *rc != manifest.ProcessRuntimeClass {
		res.err = fmt.Errorf("no containerd runtime is configured on this device; set runtimeClassName: %s to run host processes", manifest.ProcessRuntimeClass)
		d.started <- res
		return
	}
	s, err := process.BuildSpec(pod, spec, d.node)
	if err != nil {
		res.err = err
		d.started <- res
		return
	}
	s.InstanceID, s.Attempt = a.InstanceID, a.Attempt
	s.LogPath = d.logPath(pod, a.Container, a.Attempt)
	s.LogMaxBytes, s.LogMaxFiles = d.cfg.LogMaxBytes, d.cfg.LogMaxFiles
	d.gcContainer(pod, a.Container, a.Attempt)
	go func() {
		res.at, res.err = d.rt.Start(s)
		d.started <- res
	}()
}

func (d *Daemon) startDone(r startResult) {
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
	uid, name, _, ok := parseInstanceID(x.InstanceID)
	if !ok {
		return
	}
	st := x.Status
	d.log.Info("container exited", "instance", x.InstanceID, "exitCode", st.ExitCode, "reason", st.Reason)
	d.execute(d.machine.Exited(uid, name, termination(x.InstanceID, st)))
	if d.machine.Instance(uid) == nil {
		d.rt.Remove(x.InstanceID) // an orphan from a pod no record knows
	}
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
// to start and the one before it (for logs --previous); older ones go.
func (d *Daemon) gcContainer(pod *v1.Pod, container string, attempt int) {
	dirs, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "containers", fmt.Sprintf("%s_%s_*", pod.UID, container)))
	for _, dir := range dirs {
		if _, _, n, ok := parseInstanceID(filepath.Base(dir)); ok && n < attempt-1 {
			if err := d.rt.Remove(filepath.Base(dir)); err != nil {
				d.log.Warn("removing old instance", "dir", dir, "err", err)
			}
		}
	}
	logs, _ := filepath.Glob(filepath.Join(d.podLogDir(pod), container, "*.log*"))
	for _, l := range logs {
		base := filepath.Base(l)
		n, err := strconv.Atoi(base[:strings.Index(base, ".")])
		if err == nil && n < attempt-1 {
			os.Remove(l)
		}
	}
}

// forget removes everything left of a terminated, undesired pod instance.
func (d *Daemon) forget(uid types.UID) {
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
