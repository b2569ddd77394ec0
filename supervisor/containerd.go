package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/probes"
	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/manifest"
	"github.com/podvisor/podvisor/supervisor/resources"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
	"github.com/podvisor/podvisor/supervisor/runtime/process"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
	"github.com/podvisor/podvisor/supervisor/sandbox"
)

// ContainerdConfig is how pods without runtimeClassName process run.
type ContainerdConfig struct {
	// Address is containerd's socket; "" disables containerd pods.
	Address string
	// Plugin is the podvisor-containerd command (its arguments are added).
	Plugin []string
	// LogDriver is podvisor-shim, which containerd's shim runs to write
	// each container's log.
	LogDriver   string
	Snapshotter string
	Runtime     string
	AuthFile    string
	RuncRoot    string
	// NoPivotRoot has runc chroot into containers' roots, where the
	// device's root is an initramfs (pivot_root cannot leave it).
	NoPivotRoot bool
	// SandboxDir holds the pods' namespaces (/run/podvisor/sandbox).
	SandboxDir string
	// PodInit is the command of the init that holds a pod's shared PID
	// namespace (podvisor-shim --pod-init).
	PodInit []string
	// CNIConfDir and CNIBinDirs locate the pod network (defaults:
	// /etc/cni/net.d, /usr/lib/cni:/opt/cni/bin).
	CNIConfDir string
	CNIBinDirs string
	// ImageFS is a path on the file system containerd keeps images on;
	// ImageGC its garbage collection thresholds.
	ImageFS string
	ImageGC ImageGC
	// Managed, when set, has podvisor run containerd itself.
	Managed *ManagedContainerd
	// ConnectWait is how long the daemon waits for containerd at start
	// before it goes on and connects in the background.
	ConnectWait time.Duration
}

// ImageGC are the kubelet's image garbage collection thresholds, in
// percent of the image file system used (defaults 85 and 80).
type ImageGC struct {
	HighThresholdPercent int
	LowThresholdPercent  int
	// MinimumAge spares images used or imported more recently.
	MinimumAge time.Duration
}

// isProcessPod reports whether a pod runs host processes.
func isProcessPod(p *v1.Pod) bool {
	rc := p.Spec.RuntimeClassName
	return rc != nil && *rc == manifest.ProcessRuntimeClass
}

// setupContainerd starts the runtime plugin when containerd is configured.
// A containerd that is not up yet is waited for in the background: its
// pods wait, and what it runs is adopted once it answers.
func (d *Daemon) setupContainerd(stop <-chan struct{}) error {
	cc := d.cfg.Containerd
	if cc.Address == "" || len(cc.Plugin) == 0 {
		return nil
	}
	if cc.Managed != nil {
		if err := d.managedContainerd(stop); err != nil {
			return fmt.Errorf("containerd.managed: %w", err)
		}
	}
	args := append(append([]string{}, cc.Plugin...), "serve", "--address", cc.Address, "--log-driver", cc.LogDriver)
	for flag, v := range map[string]string{"--snapshotter": cc.Snapshotter, "--runtime": cc.Runtime,
		"--auth-file": cc.AuthFile, "--runc-root": cc.RuncRoot, "--cni-conf-dir": cc.CNIConfDir, "--cni-bin-dirs": cc.CNIBinDirs} {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	if cc.NoPivotRoot {
		args = append(args, "--no-pivot-root")
	}
	d.ctrd = containerd.NewClient(args, d.log)
	if !d.ctrd.Start(cc.ConnectWait) {
		d.log.Warn("containerd is not reachable yet; its pods wait until it is", "address", cc.Address)
	}
	return nil
}

// ctrdConnected is the plugin's (re)connection signal, or nil.
func (d *Daemon) ctrdConnected() <-chan struct{} {
	if d.ctrd == nil {
		return nil
	}
	return d.ctrd.Connected()
}

// ctrdExits is the containerd containers' exit channel, or nil.
func (d *Daemon) ctrdExits() <-chan process.Exit {
	if d.ctrd == nil {
		return nil
	}
	return d.ctrd.Exits()
}

// recoverContainerd reconciles what containerd runs with the records, at
// every (re)connection. Containers of current instances are adopted and
// watched (an exit that happened meanwhile arrives at once); superseded
// or unknown ones are killed and removed; a record whose container is gone
// ends as ContainerStatusUnknown. Containers this daemon already watches
// are left alone, so it is idempotent.
func (d *Daemon) recoverContainerd() {
	found, err := d.ctrd.List()
	if err != nil {
		// Adoption must not be skipped: try again shortly.
		d.log.Error("listing containerd's containers; retrying in 1s", "err", err)
		time.AfterFunc(time.Second, func() {
			select {
			case d.ctrdRetry <- struct{}{}:
			default:
			}
		})
		return
	}
	now := d.now()
	present := map[string]bool{}
	for _, f := range found {
		id := f.Labels[containerd.LabelInstance]
		present[id] = true
		if _, watched := d.onCtrd[id]; watched {
			continue
		}
		uid, name := types.UID(f.Labels[containerd.LabelPodUID]), f.Labels[containerd.LabelContainer]
		if ref := f.Labels[containerd.LabelImageRef]; ref != "" {
			d.imageRefs[id] = ref
		}
		attempt, _ := strconv.Atoi(f.Labels[containerd.LabelAttempt])
		in := d.machine.Instance(uid)
		var c *lifecycle.Container
		if in != nil {
			c = in.Container(name)
		}
		switch {
		case c == nil && f.Running:
			d.log.Warn("killing a containerd container no record knows", "instance", id)
			d.machine.RestoreOrphan(uid, f.Labels[containerd.LabelPodNamespace], f.Labels[containerd.LabelPodName], name, id, attempt, now)
			d.watchCtrd(id, f.Labels[containerd.LabelStopSignal])
		case c == nil:
			d.removeCtrd(id)
		case c.InstanceID == id && (c.Phase == lifecycle.Running || c.Phase == lifecycle.Starting) && (f.Running || f.Exit != nil):
			d.machine.SawAttempt(uid, name, attempt)
			d.log.Info("adopted running container", "pod", in.Key(), "container", name, "instance", id, "runtime", "containerd")
			// Marked first: the probes Adopted starts must aim inside it.
			d.watchCtrd(id, f.Labels[containerd.LabelStopSignal])
			d.execute(d.machine.Adopted(uid, name, id, attempt, f.StartedAt))
		case f.Running:
			d.machine.SawAttempt(uid, name, attempt)
			d.log.Warn("stopping a superseded containerd container", "instance", id)
			d.watchCtrd(id, "")
			d.ctrd.Kill(containerd.ContainerID(id))
		default:
			d.machine.SawAttempt(uid, name, attempt)
			present[id] = false
			d.removeCtrd(id)
		}
	}
	for _, in := range d.machine.Instances() {
		if isProcessPod(in.Pod) {
			continue
		}
		for _, c := range in.AllContainers() {
			if _, watched := d.onCtrd[c.InstanceID]; watched || present[c.InstanceID] || c.Phase != lifecycle.Running {
				continue
			}
			d.execute(d.machine.Exited(in.UID(), c.Name, termination(c.InstanceID, shim.Unlocated(now))))
		}
	}
}

// watchCtrd marks an instance as containerd's and waits for its exit.
func (d *Daemon) watchCtrd(instanceID, stopSignal string) {
	d.onCtrd[instanceID] = stopSignal
	d.ctrd.Watch(containerd.ContainerID(instanceID), instanceID)
}

// removeCtrd deletes a finished container (task, container, snapshot)
// once its end is saved: kept until then, a daemon that dies in between
// still learns its exit code from containerd.
func (d *Daemon) removeCtrd(instanceID string) {
	d.ctrdRemovals = append(d.ctrdRemovals, instanceID)
}

// flushCtrdRemovals removes the queued containers; it runs once nothing
// is left unsaved.
func (d *Daemon) flushCtrdRemovals() {
	if len(d.ctrdRemovals) == 0 || d.ctrd == nil {
		return
	}
	batch := d.ctrdRemovals
	d.ctrdRemovals = nil
	for _, id := range batch {
		delete(d.onCtrd, id)
	}
	go func() {
		for _, id := range batch {
			if err := d.ctrd.Remove(containerd.ContainerID(id)); err != nil {
				d.log.Warn("removing a finished containerd container", "instance", id, "err", err)
				continue
			}
			d.removeTerminationFile(id)
		}
	}()
}

// startContainerd starts a container of a containerd pod: sandbox,
// volumes, cgroup, then the plugin's Run in the background.
func (d *Daemon) startContainerd(in *lifecycle.Instance, a lifecycle.Action, res startResult) {
	fail := func(reason string, err error) {
		res.failure = &containerd.Failure{Reason: reason, Message: err.Error()}
		d.started <- res
	}
	if d.ctrd == nil {
		// Nothing was created: the container waits with the reason, as
		// the kubelet keeps one its runtime cannot create, and no
		// restart is counted.
		fail(containerd.CreateContainerError, fmt.Errorf("%w; set runtimeClassName: process to run host processes", errNoContainerd))
		return
	}
	cfg, err := d.containerConfig(in.Pod, in.Spec(a.Container), a)
	if err != nil {
		fail("CreateContainerConfigError", err)
		return
	}
	d.gcContainer(in.Pod, a.Container, a.Attempt)
	d.onCtrd[a.InstanceID] = ""
	nw := d.podNetworkFor(in.Pod, cfg.NetNS)
	res.network = nw
	spec, ips := in.Spec(a.Container), d.podIPs[in.UID()]
	go func() {
		if nw != nil {
			d.ensure(nw)
			if nw.err != nil {
				res.failure = &containerd.Failure{Reason: "FailedCreatePodSandBox", Message: nw.err.Error()}
				d.started <- res
				return
			}
			cfg.Env = withPodIP(cfg.Env, spec, nw.ips)
		} else {
			cfg.Env = withPodIP(cfg.Env, spec, ips)
		}
		reply, err := d.ctrd.Run(a.InstanceID, cfg)
		res.at, res.err, res.failure, res.stopSignal = reply.StartedAt, err, reply.Failure, reply.StopSignal
		res.imageRef = reply.ImageRef
		d.started <- res
	}()
}

// containerConfig resolves a container of a pod for the plugin.
func (d *Daemon) containerConfig(pod *v1.Pod, c *v1.Container, a lifecycle.Action) (containerd.ContainerConfig, error) {
	s, err := process.BuildSpec(pod, c, d.node)
	if err != nil {
		return containerd.ContainerConfig{}, err
	}
	cfg := containerd.ContainerConfig{
		ID: containerd.ContainerID(a.InstanceID),
		Labels: map[string]string{
			containerd.LabelPodName: pod.Name, containerd.LabelPodNamespace: pod.Namespace,
			containerd.LabelPodUID: string(pod.UID), containerd.LabelContainer: c.Name,
			containerd.LabelInstance: a.InstanceID, containerd.LabelAttempt: strconv.Itoa(a.Attempt),
		},
		Image: c.Image, PullPolicy: string(c.ImagePullPolicy),
		Command: nilIfEmpty(s.Argv[:len(c.Command)]), Args: nilIfEmpty(s.Argv[len(c.Command):]),
		Env: imageEnv(s.Env, c), WorkingDir: c.WorkingDir,
		HostNetwork: pod.Spec.HostNetwork, HostIPC: pod.Spec.HostIPC, HostPID: pod.Spec.HostPID,
		Security: securityOf(pod, c),
		LogPath:  d.logPath(pod, c.Name, a.Attempt), LogMaxBytes: d.cfg.LogMaxBytes, LogMaxFiles: d.cfg.LogMaxFiles,
	}
	if cfg.Security.SeccompProfile, err = d.seccompProfilePath(cfg.Security.SeccompProfile); err != nil {
		return cfg, err
	}
	cfg.Hostname = process.PodHostname(pod)
	if pod.Spec.HostNetwork {
		cfg.Env = hostNetworkHostname(cfg.Env, c)
	}
	if sb, err := d.sandbox(pod); err != nil {
		return cfg, err
	} else if sb != nil {
		if !pod.Spec.HostNetwork {
			cfg.NetNS, cfg.UTSNS = sb.Path(sandbox.Net), sb.Path(sandbox.UTS)
		}
		if !pod.Spec.HostIPC {
			cfg.IPCNS = sb.Path(sandbox.IPC)
		}
		if sharesPID(pod) {
			if cfg.PIDNS, err = sb.EnsurePID(d.cfg.Containerd.PodInit); err != nil {
				return cfg, err
			}
		}
	}
	volumes, err := d.setupVolumes(pod)
	if err != nil {
		return cfg, err
	}
	if cfg.Mounts, err = d.containerMounts(pod, c, volumes, s.Env); err != nil {
		return cfg, err
	}
	if m, err := d.terminationMount(c, a.InstanceID); err != nil {
		return cfg, err
	} else if m != nil {
		cfg.Mounts = append(cfg.Mounts, *m)
	}
	score := resources.OOMScoreAdj(pod, c, d.memory)
	cfg.OOMScoreAdj = &score
	if d.cg != nil {
		if !d.podCgroups[pod.UID] {
			if err := d.cg.Ensure(d.podCgroup(pod), resources.PodLimits(pod, 0)); err != nil {
				return cfg, err
			}
			d.podCgroups[pod.UID] = true
		}
		path, runcPath := d.layout.Runc(d.podCgroup(pod), cfg.ID)
		d.oomBase[path], _ = d.cg.OOMKills(d.oomCounter(pod, path))
		cfg.CgroupsPath, cfg.SystemdCgroup = runcPath, d.layout.Systemd
		l := resources.ContainerLimits(c)
		cfg.Resources = containerd.Resources{CPUShares: l.CPUShares, MemoryLimit: l.MemoryMax}
		if l.CPUQuota > 0 {
			cfg.Resources.CPUQuota, cfg.Resources.CPUPeriod = l.CPUQuota, resources.QuotaPeriod
		}
	}
	return cfg, nil
}

// sandbox makes (once) the namespaces a pod's containers share; nil when
// the pod uses every one of the host's.
func (d *Daemon) sandbox(pod *v1.Pod) (*sandbox.Sandbox, error) {
	var kinds []string
	if !pod.Spec.HostNetwork {
		kinds = append(kinds, sandbox.Net, sandbox.UTS)
	}
	if !pod.Spec.HostIPC {
		kinds = append(kinds, sandbox.IPC)
	}
	if len(kinds) == 0 && !sharesPID(pod) {
		return nil, nil
	}
	sb, err := sandbox.Create(d.cfg.Containerd.SandboxDir, string(pod.UID), process.PodHostname(pod), kinds...)
	if err != nil {
		return nil, err
	}
	return &sb, nil
}

// sharesPID reports whether a pod's containers share one PID namespace.
func sharesPID(pod *v1.Pod) bool {
	return pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace
}

// removeSandbox removes a forgotten pod's namespaces and files.
func (d *Daemon) removeSandbox(uid types.UID) {
	d.teardownNetwork(uid)
	for id := range d.imageRefs {
		if strings.HasPrefix(id, string(uid)+"_") {
			delete(d.imageRefs, id)
		}
	}
	files, _ := filepath.Glob(filepath.Join(d.cfg.DataDir, "termination", string(uid)+"_*"))
	for _, f := range files {
		d.removeTerminationFile(filepath.Base(f))
	}
	if d.cfg.Containerd.SandboxDir != "" {
		sb := sandbox.Sandbox{Dir: filepath.Join(d.cfg.Containerd.SandboxDir, string(uid))}
		if _, err := os.Stat(sb.Dir); err == nil {
			if err := sb.Remove(); err != nil {
				d.log.Warn("removing a pod sandbox", "pod", uid, "err", err)
			}
		}
	}
	d.removePodDir(uid)
}

// imageEnv is a container's environment for an image: the image's PATH
// stays unless the pod sets PATH.
func imageEnv(env []string, c *v1.Container) []string {
	for _, e := range c.Env {
		if e.Name == "PATH" {
			return env
		}
	}
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "PATH=") {
			out = append(out, kv)
		}
	}
	return out
}

// hostNetworkHostname sets HOSTNAME to the node's hostname, which a
// hostNetwork container shares: the kubelet gives the CRI no pod hostname
// then, and the CRI uses the node's. A HOSTNAME the pod sets stays.
func hostNetworkHostname(env []string, c *v1.Container) []string {
	for _, e := range c.Env {
		if e.Name == "HOSTNAME" {
			return env
		}
	}
	node, err := os.Hostname()
	if err != nil {
		return env
	}
	for i, kv := range env {
		if strings.HasPrefix(kv, "HOSTNAME=") {
			env[i] = "HOSTNAME=" + node
		}
	}
	return env
}

// nilIfEmpty keeps an image's entrypoint or cmd where the pod sets none:
// BuildSpec expanded command and args into one argv, element by element.
func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// securityOf merges the pod's and the container's security contexts.
func securityOf(pod *v1.Pod, c *v1.Container) containerd.Security {
	var s containerd.Security
	if psc := pod.Spec.SecurityContext; psc != nil {
		s.RunAsUser, s.RunAsGroup = psc.RunAsUser, psc.RunAsGroup
		s.RunAsNonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		s.SupplementalGroups = psc.SupplementalGroups
		if psc.SeccompProfile != nil {
			s.Seccomp, s.SeccompProfile = seccompOf(psc.SeccompProfile)
		}
		for _, sc := range psc.Sysctls {
			if s.Sysctls == nil {
				s.Sysctls = map[string]string{}
			}
			s.Sysctls[sc.Name] = sc.Value
		}
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.RunAsUser != nil {
			s.RunAsUser = sc.RunAsUser
		}
		if sc.RunAsGroup != nil {
			s.RunAsGroup = sc.RunAsGroup
		}
		if sc.RunAsNonRoot != nil {
			s.RunAsNonRoot = *sc.RunAsNonRoot
		}
		s.Privileged = sc.Privileged != nil && *sc.Privileged
		s.ReadOnlyRootFilesystem = sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem
		s.NoNewPrivileges = sc.AllowPrivilegeEscalation != nil && !*sc.AllowPrivilegeEscalation
		if sc.Capabilities != nil {
			for _, c := range sc.Capabilities.Add {
				s.CapAdd = append(s.CapAdd, string(c))
			}
			for _, c := range sc.Capabilities.Drop {
				s.CapDrop = append(s.CapDrop, string(c))
			}
		}
		if sc.SeccompProfile != nil {
			s.Seccomp, s.SeccompProfile = seccompOf(sc.SeccompProfile)
		}
	}
	return s
}

// ctrdSignal sends a stop signal to a containerd container: the pod's
// lifecycle.stopSignal, else the image's STOPSIGNAL, else SIGTERM.
func (d *Daemon) ctrdSignal(in *lifecycle.Instance, a lifecycle.Action) error {
	sig := unix.SignalNum(a.Signal)
	if spec := in.Spec(a.Container); spec == nil || spec.Lifecycle == nil || spec.Lifecycle.StopSignal == nil {
		if image := d.onCtrd[a.InstanceID]; image != "" {
			if s := signalByName(image); s != 0 {
				sig = s
			}
		}
	}
	if sig == 0 {
		sig = unix.SIGTERM
	}
	return d.ctrd.Signal(containerd.ContainerID(a.InstanceID), sig)
}

// signalByName reads "SIGUSR1", "USR1" or "10".
func signalByName(s string) syscall.Signal {
	if n, err := strconv.Atoi(s); err == nil {
		return syscall.Signal(n)
	}
	if !strings.HasPrefix(s, "SIG") {
		s = "SIG" + s
	}
	return unix.SignalNum(s)
}

// ctrdTarget points probes and hooks at a containerd container: commands
// run inside it, connections are made from inside the pod's network.
func (d *Daemon) ctrdTarget(in *lifecycle.Instance, instanceID string, t *probes.Target) {
	if !in.Pod.Spec.HostNetwork {
		t.Netns = filepath.Join(d.cfg.Containerd.SandboxDir, string(in.UID()), sandbox.Net)
	}
	id := containerd.ContainerID(instanceID)
	t.ExecIn = func(ctx context.Context, command []string, timeout time.Duration) (int, string, error) {
		r, err := d.ctrd.Exec(id, command, timeout)
		if err == nil && r.TimedOut {
			err = fmt.Errorf("timed out after %v", timeout)
		}
		return r.ExitCode, r.Output, err
	}
}

// withImageIDs sets the imageID of containerd containers' statuses, as
// the kubelet takes it from the CRI (ContainerStatus.ImageRef): that of
// the container the status describes, the current one or else the last.
func (d *Daemon) withImageIDs(statuses []v1.ContainerStatus) {
	for i := range statuses {
		cs := &statuses[i]
		id := cs.ContainerID
		if id == "" && cs.LastTerminationState.Terminated != nil {
			id = cs.LastTerminationState.Terminated.ContainerID
		}
		if ref := d.imageRefs[strings.TrimPrefix(id, lifecycle.ContainerIDPrefix)]; ref != "" {
			cs.ImageID = ref
		}
	}
}

// onContainerd reports whether an instance runs on containerd.
func (d *Daemon) onContainerd(instanceID string) bool {
	_, ok := d.onCtrd[instanceID]
	return ok
}
