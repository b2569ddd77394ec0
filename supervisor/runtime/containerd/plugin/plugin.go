// Package plugin is the podvisor-containerd runtime plugin: it serves the
// daemon's requests (package containerd) with containerd's own client. It
// keeps no state: containerd holds every container, labelled with its
// podvisor instance, and the plugin reads them back when asked.
package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"syscall"
	"time"

	cgroup1stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	cgroup2stats "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/containerd/api/types/runc/options"
	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// Config is how the plugin reaches and uses containerd.
type Config struct {
	Address     string
	Snapshotter string // "" is containerd's default
	Runtime     string // "" is io.containerd.runc.v2
	// AuthFile is a docker config.json with registry credentials, for
	// pulls without a login of the pod's pull secrets.
	AuthFile string
	// CertsDir holds registries' CAs: <host[:port]>/*.crt are trusted
	// for that registry besides the system's (Docker's certs.d layout).
	// "" trusts the system's only.
	CertsDir string
	// RuncRoot is runc's state directory ("" is the shim's default,
	// /run/containerd/runc): tests keep theirs apart from the host's.
	RuncRoot string
	// NoPivotRoot has runc chroot into a container's root instead of
	// pivot_root, which an initramfs root does not allow.
	NoPivotRoot bool
	// FIFODir holds containers' output FIFOs (default DefaultFIFODir).
	FIFODir string
	// CNIConfDir holds the pod network's configuration (default
	// /etc/cni/net.d); CNIBinDirs the CNI plugins.
	CNIConfDir string
	CNIBinDirs []string
}

// Plugin serves the Runtime RPC service.
type Plugin struct {
	cfg    Config
	client *ctrd.Client
	log    *slog.Logger
	net    *network
	logs   fifoLogs
	// forgotten are the pods whose shim groups ended.
	forgotten forgottenGroups
	// gate orders imports and hub pods' pulls.
	gate   importGate
	images imageCache
	// snapName is the snapshotter, once resolved.
	snapMu   sync.Mutex
	snapName string
}

// labelStarted records when a container's task started: containerd's task
// status does not say, and a restarted daemon reports it.
const labelStarted = "io.podvisor.started"

// labelExit records how a container's task ended (a JSON ExitStatus):
// the task is deleted at its exit, and the label keeps its status for a
// daemon that did not save it yet.
const labelExit = "io.podvisor.exit"

// New connects to containerd. The connection re-establishes itself when
// containerd restarts; requests in between fail and are retried by the
// daemon or, for waits, here.
func New(cfg Config, log *slog.Logger) (*Plugin, error) {
	if cfg.Runtime == "" {
		cfg.Runtime = "io.containerd.runc.v2"
	}
	c, err := ctrd.New(cfg.Address, ctrd.WithDefaultNamespace(pluginapi.Namespace), ctrd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("containerd at %s: %w", cfg.Address, err)
	}
	if cfg.CNIConfDir == "" {
		cfg.CNIConfDir = "/etc/cni/net.d"
	}
	if len(cfg.CNIBinDirs) == 0 {
		cfg.CNIBinDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}
	}
	if cfg.FIFODir == "" {
		cfg.FIFODir = DefaultFIFODir
	}
	return &Plugin{cfg: cfg, client: c, log: log, net: &network{confDir: cfg.CNIConfDir, binDirs: cfg.CNIBinDirs},
		logs: fifoLogs{root: cfg.FIFODir, log: log}}, nil
}

// Close stops copying containers' output and drops the connection. The
// FIFOs stay for the next plugin; their writers block once they are full.
func (p *Plugin) Close() error {
	p.logs.detach()
	return p.client.Close()
}

func (p *Plugin) ctx() context.Context {
	return namespaces.WithNamespace(context.Background(), pluginapi.Namespace)
}

// Version reports containerd's version.
func (p *Plugin) Version(_ pluginapi.Empty, reply *pluginapi.VersionReply) error {
	v, err := p.client.Version(p.ctx())
	if err != nil {
		return err
	}
	reply.Version, reply.Revision = v.Version, v.Revision
	return nil
}

// Run pulls the image if the policy says so, creates the container and
// starts its task. Any failure removes what was made: the instance ends
// and is never started again under its ID.
func (p *Plugin) Run(args pluginapi.RunArgs, reply *pluginapi.RunReply) error {
	ctx := p.ctx()
	cfg := args.Config
	img, fail := p.ensureImage(ctx, cfg.Image, cfg.PullPolicy, cfg.LocalImages, args.Pull)
	if fail != nil {
		reply.Failure = fail
		return nil
	}
	info, err := p.imageInfo(ctx, img)
	if err != nil {
		reply.Failure = &pluginapi.Failure{Reason: pluginapi.CreateContainerError, Message: err.Error()}
		return nil
	}
	opts, stopSignal, err := p.specOpts(img, info, cfg)
	if err != nil {
		reply.Failure = &pluginapi.Failure{Reason: pluginapi.CreateContainerError, Message: err.Error()}
		return nil
	}
	// The image's use is recorded as Run ends, the container started or
	// not: a write to containerd's database, kept off the way to the start.
	defer p.touchImage(ctx, img)
	snapshotter, err := p.snapshotter(ctx)
	if err != nil {
		reply.Failure = &pluginapi.Failure{Reason: pluginapi.CreateContainerError, Message: err.Error()}
		return nil
	}
	logs := logSpec{Path: cfg.LogPath, MaxBytes: cfg.LogMaxBytes, MaxFiles: cfg.LogMaxFiles}
	own := logs.labels()
	if cfg.ShimGroup != "" {
		own[labelShimGroup] = cfg.ShimGroup
	}
	if len(cfg.SecretEnv) > 0 {
		own[pluginapi.LabelEnvFile] = cfg.EnvFile
	}
	c, err := p.client.NewContainer(ctx, cfg.ID,
		ctrd.WithContainerLabels(cfg.Labels), ctrd.WithAdditionalContainerLabels(own),
		p.withSnapshot(cfg.ID, snapshotter, img, info),
		ctrd.WithRuntime(p.cfg.Runtime, p.runtimeOptions(cfg.SystemdCgroup)),
		ctrd.WithNewSpec(opts...),
	)
	if err != nil {
		removeEnvFile(cfg)
		reply.Failure = &pluginapi.Failure{Reason: pluginapi.CreateContainerError, Message: err.Error()}
		return nil
	}
	task, err := p.newTask(ctx, c, cfg.ShimGroup, logs)
	if err == nil {
		err = task.Start(ctx)
		if err != nil {
			task.Delete(ctx, ctrd.WithProcessKill)
		}
	}
	if err != nil {
		p.logs.finish(cfg.ID)
		c.Delete(ctx, ctrd.WithSnapshotCleanup)
		removeEnvFile(cfg)
		reply.Failure = &pluginapi.Failure{Reason: pluginapi.StartError, Message: err.Error()}
		return nil
	}
	reply.StartedAt, reply.Pid, reply.StopSignal = time.Now(), int(task.Pid()), stopSignal
	reply.ImageRef = info.ref
	labels := map[string]string{labelStarted: reply.StartedAt.Format(time.RFC3339Nano), pluginapi.LabelImageRef: reply.ImageRef}
	if stopSignal != "" {
		labels[pluginapi.LabelStopSignal] = stopSignal
	}
	if _, err := c.SetLabels(ctx, labels); err != nil {
		p.log.Warn("recording the start time", "id", cfg.ID, "err", err)
	}
	if g := podShimGroup(map[string]string{labelShimGroup: cfg.ShimGroup, pluginapi.LabelPodUID: cfg.Labels[pluginapi.LabelPodUID]}); g != "" {
		go func() { // this task keeps the pod's shim now
			if err := p.removeParked(p.ctx(), g); err != nil {
				p.log.Warn("removing a pod's parked containers", "pod", g, "err", err)
			}
		}()
	}
	return nil
}

// runtimeOptions are the runc shim's options for a container: nil keeps
// the shim's defaults.
func (p *Plugin) runtimeOptions(systemdCgroup bool) any {
	if p.cfg.RuncRoot == "" && !systemdCgroup && !p.cfg.NoPivotRoot {
		return nil
	}
	return &options.Options{Root: p.cfg.RuncRoot, SystemdCgroup: systemdCgroup, NoPivotRoot: p.cfg.NoPivotRoot}
}

// Wait blocks until the container's task exits and returns how. A lost
// connection to containerd (it restarts, or is upgraded) is waited out:
// the task runs on under its shim and the wait resumes.
func (p *Plugin) Wait(args pluginapi.IDArgs, reply *pluginapi.ExitStatus) error {
	ctx := p.ctx()
	for delay := 100 * time.Millisecond; ; delay = min(delay*2, 5*time.Second) {
		st, err := p.waitOnce(ctx, args.ID)
		if err == nil {
			*reply = st
			return nil
		}
		if errdefs.IsNotFound(err) {
			*reply = pluginapi.Unlocated(time.Now())
			return nil
		}
		p.log.Warn("waiting for a task; retrying", "id", args.ID, "err", err, "in", delay)
		time.Sleep(delay)
	}
}

func (p *Plugin) waitOnce(ctx context.Context, id string) (pluginapi.ExitStatus, error) {
	c, err := p.client.LoadContainer(ctx, id)
	if err != nil {
		return pluginapi.ExitStatus{}, err
	}
	if st, ok := recordedExit(ctx, c); ok {
		return st, nil // finished by an earlier wait
	}
	task, err := p.loadTask(ctx, c)
	if err != nil {
		return pluginapi.ExitStatus{}, err
	}
	statusC, err := task.Wait(ctx)
	if err != nil {
		return pluginapi.ExitStatus{}, err
	}
	es := <-statusC
	if err := es.Error(); err != nil {
		return pluginapi.ExitStatus{}, err
	}
	st := exitStatus(es.ExitCode(), es.ExitTime())
	p.finishTask(ctx, c, task, &st)
	return st, nil
}

// finishTask records a task's exit on its container once the container's
// output is in its log, before the exit is reported (the CRI, too, waits
// for the container's IO): else the last line of a container that exits
// right after printing it may be missing when the daemon reads the log
// (FallbackToLogsOnError) or a user does. containerd's shim closes the
// FIFOs when the container's processes are gone; if one outlives the
// container holding them (hostPID), deleting the task has the shim close
// them. Otherwise the ended task stays until its container is removed
// (the daemon does so once it saved the exit): deleting it is not on the
// way from an exit to the restart, and a per-pod shim keeps a task.
//
// The task's cgroup goes with it, so whether the OOM killer ended it is
// read first.
func (p *Plugin) finishTask(ctx context.Context, c ctrd.Container, task ctrd.Task, st *pluginapi.ExitStatus) {
	if st.Signal == 9 && st.Reason == "" && oomKilled(ctx, task) {
		st.Reason = "OOMKilled"
	}
	if !p.logs.wait(c.ID(), logDrainTimeout) {
		if _, err := task.Delete(ctx); err != nil && !errdefs.IsNotFound(err) {
			p.log.Warn("deleting a finished task", "id", c.ID(), "err", err)
		}
	}
	p.logs.finish(c.ID())
	data, _ := json.Marshal(st)
	if _, err := c.SetLabels(ctx, map[string]string{labelExit: string(data)}); err != nil {
		// Its task's status still holds the exit for a later List.
		p.log.Warn("recording a container's exit", "id", c.ID(), "err", err)
	}
}

// loadTask loads a container's task and, if it runs and this plugin does
// not copy its output yet (it was restarted), re-opens its FIFOs into its
// log. An ended task's FIFOs are removed: nobody writes them any more.
func (p *Plugin) loadTask(ctx context.Context, c ctrd.Container) (ctrd.Task, error) {
	task, err := c.Task(ctx, nil)
	if err != nil {
		return nil, err
	}
	st, err := task.Status(ctx)
	if err != nil {
		return nil, err
	}
	if st.Status != ctrd.Running && st.Status != ctrd.Paused {
		return c.Task(ctx, p.logs.removeFIFOs)
	}
	labels, err := c.Labels(ctx)
	if err != nil {
		return nil, err
	}
	return c.Task(ctx, p.logs.attach(c, labels))
}

// oomKilled reports whether the kernel's OOM killer killed a process in
// the task's cgroup, from the task's metrics (cgroup v1 or v2).
func oomKilled(ctx context.Context, task ctrd.Task) bool {
	m, err := task.Metrics(ctx)
	if err != nil || m.Data == nil {
		return false
	}
	v, err := typeurl.UnmarshalAny(m.Data)
	if err != nil {
		return false
	}
	switch s := v.(type) {
	case *cgroup1stats.Metrics:
		return s.GetMemoryOomControl().GetOomKill() > 0
	case *cgroup2stats.Metrics:
		return s.GetMemoryEvents().GetOomKill() > 0
	}
	return false
}

// recordedExit is the exit finishTask recorded on a container.
func recordedExit(ctx context.Context, c ctrd.Container) (pluginapi.ExitStatus, bool) {
	labels, err := c.Labels(ctx)
	if err != nil || labels[labelExit] == "" {
		return pluginapi.ExitStatus{}, false
	}
	var st pluginapi.ExitStatus
	if json.Unmarshal([]byte(labels[labelExit]), &st) != nil {
		return pluginapi.ExitStatus{}, false
	}
	return st, true
}

// exitStatus turns containerd's exit code (128+n for a signal, as runc
// reports it) into podvisor's.
func exitStatus(code uint32, at time.Time) pluginapi.ExitStatus {
	st := pluginapi.ExitStatus{ExitCode: int32(code), FinishedAt: at}
	if code > 128 && code < 128+65 {
		st.Signal = int32(code - 128)
	}
	return st
}

// Signal sends a signal to a container's main process or all its
// processes. A container that is gone is not an error.
func (p *Plugin) Signal(args pluginapi.SignalArgs, _ *pluginapi.Empty) error {
	ctx := p.ctx()
	c, err := p.client.LoadContainer(ctx, args.ID)
	if err != nil {
		return ignoreNotFound(err)
	}
	task, err := c.Task(ctx, nil)
	if err != nil {
		return ignoreNotFound(err)
	}
	var opts []ctrd.KillOpts
	if args.All {
		opts = append(opts, ctrd.WithKillAll)
	}
	err = task.Kill(ctx, syscall.Signal(args.Signal), opts...)
	if errdefs.IsNotFound(err) || errors.Is(err, syscall.ESRCH) {
		return nil
	}
	return err
}

// Remove deletes a container, its task (killed if it still runs) and its
// snapshot; the ended last task of a pod's own shim is parked instead
// (shimgroup.go).
func (p *Plugin) Remove(args pluginapi.IDArgs, _ *pluginapi.Empty) error {
	ctx := p.ctx()
	c, err := p.client.LoadContainer(ctx, args.ID)
	if err != nil {
		return ignoreNotFound(err)
	}
	if labels, err := c.Labels(ctx); err == nil && p.park(ctx, c, labels) {
		p.logs.finish(args.ID)
		return nil
	}
	return p.deleteContainer(ctx, c)
}

// ignoreNotFound: what is gone needs no signal and no removal.
func ignoreNotFound(err error) error {
	if errdefs.IsNotFound(err) {
		return nil
	}
	return err
}

// List returns every container podvisor made, with its task's state,
// but for those the daemon removed and the plugin parked.
func (p *Plugin) List(_ pluginapi.Empty, reply *pluginapi.ListReply) error {
	ctx := p.ctx()
	cs, err := p.client.Containers(ctx, `labels."`+pluginapi.LabelInstance+`"`)
	if err != nil {
		return err
	}
	for _, c := range cs {
		labels, err := c.Labels(ctx)
		if err != nil {
			return err
		}
		if p.parked(ctx, c, labels) {
			continue
		}
		f := pluginapi.Found{ID: c.ID(), Labels: labels}
		f.StartedAt, _ = time.Parse(time.RFC3339Nano, labels[labelStarted])
		task, err := c.Task(ctx, nil)
		switch {
		case (err == nil || errdefs.IsNotFound(err)) && labels[labelExit] != "":
			if st, ok := recordedExit(ctx, c); ok {
				st.StartedAt = f.StartedAt
				f.Exit = &st
			}
		case errdefs.IsNotFound(err):
			// Created but never started, or containerd lost the task.
		case err != nil:
			return err
		default:
			st, err := task.Status(ctx)
			if err != nil {
				return err
			}
			switch st.Status {
			case ctrd.Stopped:
				es := exitStatus(st.ExitStatus, st.ExitTime)
				es.StartedAt = f.StartedAt
				f.Exit = &es
			default:
				f.Running = true
			}
		}
		reply.Containers = append(reply.Containers, f)
	}
	return nil
}

// shimStartAttempts bounds newTask's tries.
const shimStartAttempts = 4

// shimStartRaced reports whether NewTask failed because another start of
// the group's shim raced it (newTask).
func shimStartRaced(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "failed to start shim") ||
		strings.Contains(msg, "failed to create shim task") && strings.Contains(msg, "ttrpc: closed")
}

// newTask creates a container's task. Containers of one shim group whose
// shim is not running yet race to start it: containerd 1.6's runc shim
// lets one remove the socket another is still setting up ("create new
// shim socket: chmod …: no such file or directory"), as the containers
// of a new pod starting together showed, or hands one the connection of
// a shim that then exits ("failed to create shim task: ttrpc: closed",
// two pods' first containers starting together in the systemd VM test).
// containerd has removed the failed task's bundle either way. The loser
// tries again, a little later, and joins the shim the winner started.
func (p *Plugin) newTask(ctx context.Context, c ctrd.Container, group string, logs logSpec) (ctrd.Task, error) {
	for attempt := 1; ; attempt++ {
		task, err := c.NewTask(ctx, p.logs.creator(logs))
		if err == nil || group == "" || attempt == shimStartAttempts || !shimStartRaced(err) {
			return task, err
		}
		p.logs.finish(c.ID())
		p.log.Info("starting the shim raced another start; trying again", "id", c.ID(), "attempt", attempt, "err", err)
		select {
		case <-time.After(time.Duration(attempt) * 25 * time.Millisecond):
		case <-ctx.Done():
			return nil, err
		}
	}
}
