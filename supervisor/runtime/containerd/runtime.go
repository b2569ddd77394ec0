// Package containerd runs pods' containers on containerd through a runtime
// plugin process, podvisor-containerd, and is the daemon's side of it: the
// runtime.Runtime of pods that name no runtime class.
//
// Why a separate process: containerd's client speaks gRPC, and linking it
// into the daemon measured +12 MiB of binary and +10.5 MiB of resident
// memory at idle (15 → 25 MiB), paid by every device, also by those that
// run only process pods. The plugin is started only where containerd pods
// run, holds no state of its own (containerd does, labelled by instance),
// and dies with the daemon; a new daemon starts a new plugin and adopts
// what containerd runs. The protocol is net/rpc with JSON over the
// plugin's stdin and stdout, both in the standard library (pluginapi).
package containerd

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/vocab"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/supervisor/sandbox"
)

// Name is the runtime class of containerd pods, which also runs the pods
// that name no runtime class.
const Name = "containerd"

// ErrNotConfigured is why containerd pods cannot run on a device without
// containerd.
var ErrNotConfigured = errors.New("containerd is not configured on this device (containerd.address)")

// Runtime runs containerd pods through the plugin: the daemon's side of
// it, holding what the daemon knows of each instance.
type Runtime struct {
	cfg     Config
	dataDir string
	cgroups runtime.Cgroups
	log     *slog.Logger
	client  *Client

	mu sync.Mutex
	// followed are the instances whose exits this daemon waits for, with
	// their image's stop signal; foundSignals the stop signals of the
	// containers the last Recover listed.
	followed     map[string]string
	foundSignals map[string]string
	imageRefs    map[string]string // instance → imageID, for statuses
	// podNets are pods' network attachments being made; podIPs the
	// addresses of those attached (read back lazily after a restart).
	podNets map[types.UID]*podNetwork
	podIPs  map[types.UID][]string
	// forgetting are the pods whose network and namespaces are being
	// removed (forget.go), each closed when done.
	forgetting map[types.UID]chan struct{}
	// starting are the starts in flight, by instance, each closed when
	// done (restart.go).
	starting map[string]chan struct{}
	pruning  atomic.Bool // an image garbage collection runs
}

// New returns the containerd runtime for cfg; Launch runs its plugin.
// dataDir holds pods' files, termination messages and seccomp profiles.
func New(cfg Config, dataDir string, cg runtime.Cgroups, log *slog.Logger) *Runtime {
	return &Runtime{cfg: cfg, dataDir: dataDir, cgroups: cg, log: log,
		followed: map[string]string{}, foundSignals: map[string]string{}, imageRefs: map[string]string{},
		podNets: map[types.UID]*podNetwork{}, podIPs: map[types.UID][]string{}, forgetting: map[types.UID]chan struct{}{},
		starting: map[string]chan struct{}{}}
}

// Configured reports whether cfg runs containerd pods at all.
func (cfg Config) Configured() bool { return cfg.Address != "" && len(cfg.Plugin) > 0 }

// Launch starts the plugin (and podvisor's own containerd when managed).
// A containerd that is not up yet is waited for in the background: its
// pods wait, and what it runs is adopted once it answers.
func (r *Runtime) Launch(stop <-chan struct{}) error {
	cc := r.cfg
	if cc.Managed != nil {
		if err := r.managedContainerd(stop); err != nil {
			return fmt.Errorf("containerd.managed: %w", err)
		}
	}
	args := append(append([]string{}, cc.Plugin...), "serve", "--address", cc.Address)
	if cc.SandboxDir != "" {
		// Beside the sandboxes: /run/podvisor/fifo by default.
		args = append(args, "--fifo-dir", filepath.Join(filepath.Dir(cc.SandboxDir), "fifo"))
	}
	for flag, v := range map[string]string{"--snapshotter": cc.Snapshotter, "--runtime": cc.Runtime,
		"--auth-file": cc.AuthFile, "--certs-dir": cc.CertsDir, "--runc-root": cc.RuncRoot, "--cni-conf-dir": cc.CNIConfDir, "--cni-bin-dirs": cc.CNIBinDirs} {
		if v != "" {
			args = append(args, flag, v)
		}
	}
	if cc.NoPivotRoot {
		args = append(args, "--no-pivot-root")
	}
	r.client = NewClient(args, r.log)
	r.client.OnVersion = func(version string) {
		if warning := sharedShimCost(cc.ShimGroup, version); warning != "" {
			r.log.Warn(warning, "version", version, "shimGroup", cc.ShimGroup)
		}
	}
	if !r.client.Start(cc.ConnectWait) {
		r.log.Warn("containerd is not reachable yet; its pods wait until it is", "address", cc.Address)
	}
	r.resumeDetaches()
	return nil
}

// Close stops the plugin once the pods being forgotten are detached (at
// most forgetWait); containers keep running.
func (r *Runtime) Close() {
	r.waitForgotten(forgetWait)
	r.client.Close()
}

// Connected signals each (re)connection to containerd.
func (r *Runtime) Connected() <-chan struct{} { return r.client.Connected() }

// Exits delivers the end of every followed container.
func (r *Runtime) Exits() <-chan runtime.Exit { return r.client.Exits() }

// Start creates and starts a container: its configuration (sandbox,
// volumes, cgroup) is made here, the pod's network and the plugin's Run
// on another goroutine.
func (r *Runtime) Start(c *runtime.Container, done func(runtime.Started)) {
	r.awaitForgotten(c.Pod.UID)
	if err := pendingPullSecret(c.Pod, c.Node.Objects); err != nil {
		done(runtime.Started{Err: runtime.ConfigError(err)})
		return
	}
	cfg, err := r.containerConfig(c)
	if err != nil {
		done(runtime.Started{Err: runtime.ConfigError(err)})
		return
	}
	// The pull secrets are read here, on the daemon's loop, where its
	// getter is read; their logins go to the plugin for this start only.
	pull, events := pullAuth(c.Pod, c.Node.Objects, cfg.Image)
	done = withEvents(done, events)
	r.mu.Lock()
	r.followed[c.InstanceID] = ""
	nw := r.podNetworkFor(c.Pod, cfg.NetNS)
	ips := r.podIPsLocked(c.Pod)
	r.mu.Unlock()
	spec := c.Spec
	started := r.runStarted(c.InstanceID)
	go func() {
		defer started()
		if nw != nil {
			r.ensure(nw)
			r.networkDone(c.Pod.UID, nw)
			if nw.err != nil {
				r.forget(c.InstanceID)
				done(runtime.Started{Err: &runtime.CreateError{Reason: "FailedCreatePodSandBox", Message: nw.err.Error()}})
				return
			}
			ips = nw.ips
		}
		cfg.Env = withPodIP(cfg.Env, spec, ips)
		reply, err := r.client.Run(c.InstanceID, cfg, pull)
		switch {
		case err != nil:
			// The plugin could not be asked, or died answering: the
			// container may exist, so it goes once its end is saved.
			// Nothing ran: the container waits with RunContainerError,
			// as the kubelet shows a failed StartContainer call.
			done(runtime.Started{Err: &runtime.CreateError{Reason: "RunContainerError", Message: err.Error()}, Leftover: true})
		case reply.Failure != nil && reply.Failure.Reason == pluginapi.StartError:
			r.forget(c.InstanceID) // the plugin removed it
			done(runtime.Started{Err: errors.New(reply.Failure.Message)})
		case reply.Failure != nil:
			r.forget(c.InstanceID)
			done(runtime.Started{Err: &runtime.CreateError{Reason: reply.Failure.Reason, Message: reply.Failure.Message}})
		default:
			r.mu.Lock()
			r.followed[c.InstanceID] = reply.StopSignal
			if reply.ImageRef != "" {
				r.imageRefs[c.InstanceID] = reply.ImageRef
			}
			r.mu.Unlock()
			done(runtime.Started{At: reply.StartedAt})
		}
	}()
}

// forget stops counting an instance as followed.
func (r *Runtime) forget(instanceID string) {
	r.mu.Lock()
	delete(r.followed, instanceID)
	delete(r.foundSignals, instanceID)
	r.mu.Unlock()
}

// Signal sends a stop signal to a container: sig, or 0 for the image's
// STOPSIGNAL, else SIGTERM. It returns at once, as Kill does: the call
// takes the same way through the plugin, containerd, the shim and runc
// (seconds on a loaded device), and the daemon's loop stops a pod's
// containers one after another, which the kubelet stops in parallel; a
// loop waiting on it would hold every pod's work meanwhile and start
// each container's grace period late.
func (r *Runtime) Signal(instanceID string, sig syscall.Signal) error {
	if sig == 0 {
		r.mu.Lock()
		image := r.followed[instanceID]
		r.mu.Unlock()
		if image != "" {
			sig = signalByName(image)
		}
	}
	if sig == 0 {
		sig = unix.SIGTERM
	}
	go func() {
		if err := r.client.Signal(ContainerID(instanceID), sig); err != nil {
			r.log.Warn("stop signal", "instance", instanceID, "signal", sig, "err", err)
		}
	}()
	return nil
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

// Kill SIGKILLs every process of a container. It returns at once: the
// call goes through the plugin, containerd, the shim and `runc kill --all`
// (which freezes the cgroup on v1), hundreds of milliseconds on a busy
// device, and the daemon's loop kills a pod's containers one after another
// at their grace deadline, which must be one moment for all of them, as
// the kubelet kills them in parallel. The end arrives on Exits as always.
func (r *Runtime) Kill(instanceID string) error {
	go func() {
		if err := r.client.Kill(ContainerID(instanceID)); err != nil {
			r.log.Warn("kill", "instance", instanceID, "err", err)
		}
	}()
	return nil
}

// Remove deletes a finished container (task, container, snapshot) and its
// termination message file, once its pod's starts in flight are done
// (restart.go). The daemon calls it once the end is saved: kept until
// then, a daemon that dies in between still learns its exit code from
// containerd.
func (r *Runtime) Remove(instanceID string) error {
	r.forget(instanceID)
	r.awaitPodStarts(instanceID)
	if err := r.client.Remove(ContainerID(instanceID)); err != nil {
		return err
	}
	r.removeTerminationFile(instanceID)
	r.removeEnvFile(instanceID)
	return nil
}

// Recover lists podvisor's containers in containerd. Those this daemon
// does not follow yet are followed when the daemon says so (Follow).
func (r *Runtime) Recover() ([]runtime.Found, error) {
	found, err := r.client.List()
	if err != nil {
		return nil, err
	}
	out := make([]runtime.Found, 0, len(found))
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, f := range found {
		id := f.Labels[pluginapi.LabelInstance]
		attempt, _ := strconv.Atoi(f.Labels[pluginapi.LabelAttempt])
		x := runtime.Found{InstanceID: id, PodUID: types.UID(f.Labels[pluginapi.LabelPodUID]), PodNamespace: f.Labels[pluginapi.LabelPodNamespace],
			PodName: f.Labels[pluginapi.LabelPodName], Container: f.Labels[pluginapi.LabelContainer], Attempt: attempt,
			Alive: f.Running, StartedAt: f.StartedAt}
		if f.Exit != nil {
			e := exitOf(id, *f.Exit)
			x.Exit = &e
		}
		_, x.Followed = r.followed[id]
		if !x.Followed {
			if ref := f.Labels[pluginapi.LabelImageRef]; ref != "" {
				r.imageRefs[id] = ref
			}
			r.foundSignals[id] = f.Labels[pluginapi.LabelStopSignal]
		}
		out = append(out, x)
	}
	return out, nil
}

// Follow waits for a found container's exit.
func (r *Runtime) Follow(instanceID string) {
	r.mu.Lock()
	r.followed[instanceID] = r.foundSignals[instanceID]
	delete(r.foundSignals, instanceID)
	r.mu.Unlock()
	r.client.Watch(ContainerID(instanceID), instanceID)
}

// Follows reports whether an instance is being started or followed.
func (r *Runtime) Follows(instanceID string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.followed[instanceID]
	return ok
}

// TerminationFile is the host file bound at a container's
// terminationMessagePath.
func (r *Runtime) TerminationFile(instanceID string) string {
	return filepath.Join(r.dataDir, "termination", instanceID)
}

// InstanceCgroup is an instance's own cgroup, named by its containerd ID
// as the kubelet names them, so a restart need not wait for the last
// instance's removal.
func (r *Runtime) InstanceCgroup(pod *v1.Pod, container, instanceID string) string {
	if instanceID == "" {
		return r.cgroups.Layout.Container(r.cgroups.PodCgroup(pod), pod.UID, container)
	}
	cg, _ := r.cgroups.Layout.Runc(r.cgroups.PodCgroup(pod), ContainerID(instanceID))
	return cg
}

// ExecTarget has the CLI run the plugin's exec.
func (r *Runtime) ExecTarget(_ *v1.Pod, _, instanceID string, _ runtime.PodEnv) (runtime.ExecTarget, error) {
	return runtime.ExecTarget{Runtime: Name, Plugin: r.cfg.Plugin[0], Address: r.cfg.Address, ContainerID: ContainerID(instanceID)}, nil
}

// Exec runs a command inside a running container (probes, hooks).
func (r *Runtime) Exec(instanceID string, command []string, timeout time.Duration) (int, string, error) {
	reply, err := r.client.Exec(ContainerID(instanceID), command, timeout)
	if err == nil && reply.TimedOut {
		err = fmt.Errorf("%w after %v", runtime.ErrExecTimedOut, timeout)
	}
	return reply.ExitCode, reply.Output, err
}

// NetNS is the pod's network namespace ("" on the host's network).
func (r *Runtime) NetNS(pod *v1.Pod) string {
	if pod.Spec.HostNetwork {
		return ""
	}
	return filepath.Join(r.cfg.SandboxDir, string(pod.UID), sandbox.Net)
}

// DecorateStatuses sets the imageID of containers' statuses, as the
// kubelet takes it from the CRI (ContainerStatus.ImageRef): that of the
// container the status describes, the current one or else the last; and
// names containers by their containerd IDs, as kubectl shows them for a
// CRI runtime ("containerd://…").
func (r *Runtime) DecorateStatuses(statuses []v1.ContainerStatus) {
	r.mu.Lock()
	for i := range statuses {
		cs := &statuses[i]
		id := cs.ContainerID
		if id == "" && cs.LastTerminationState.Terminated != nil {
			id = cs.LastTerminationState.Terminated.ContainerID
		}
		if ref := r.imageRefs[strings.TrimPrefix(id, vocab.ContainerIDPrefix)]; ref != "" {
			cs.ImageID = ref
		}
	}
	r.mu.Unlock()
	rename := func(id *string) {
		if rest, ok := strings.CutPrefix(*id, vocab.ContainerIDPrefix); ok {
			*id = "containerd://" + ContainerID(rest)
		}
	}
	for i := range statuses {
		cs := &statuses[i]
		rename(&cs.ContainerID)
		if t := cs.State.Terminated; t != nil {
			rename(&t.ContainerID)
		}
		if t := cs.LastTerminationState.Terminated; t != nil {
			rename(&t.ContainerID)
		}
	}
}

// Images lists images (runtime.Images).
func (r *Runtime) Images() ([]runtime.Image, error) {
	imgs, err := r.client.Images()
	out := make([]runtime.Image, len(imgs))
	for i, img := range imgs {
		out[i] = runtime.Image(img)
	}
	return out, err
}

// Import imports an image archive on the device.
func (r *Runtime) Import(path string) ([]string, error) { return r.client.Import(path) }

// RemoveImage deletes an unused image.
func (r *Runtime) RemoveImage(name string) error { return r.client.RemoveImage(name) }

// ImageGC is the image garbage collection's configuration.
func (r *Runtime) ImageGC() runtime.ImageGC { return r.cfg.ImageGC }

// ImageFS is a path on the file system containerd keeps images on.
func (r *Runtime) ImageFS() string { return r.cfg.ImageFS }

// PruneImages removes unused images in the background, one pass at a time.
func (r *Runtime) PruneImages(a runtime.PruneArgs) {
	if !r.pruning.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer r.pruning.Store(false)
		reply, err := r.client.PruneImages(pluginapi.PruneArgs{Bytes: a.Bytes, All: a.All, MinAge: a.MinAge})
		if err != nil {
			r.log.Warn("image garbage collection", "err", err)
			return
		}
		if len(reply.Removed) > 0 {
			r.log.Info("removed unused images", "images", strings.Join(reply.Removed, ", "), "freed", reply.Freed)
		}
	}()
}

// ImageWaitReasons are the waiting reasons of containers an image that
// arrived may let start.
func (r *Runtime) ImageWaitReasons() []string {
	return []string{pluginapi.ErrImagePull, pluginapi.ErrImageNeverPull}
}

// Exec runs a command in a container as a target says, the CLI's side of
// exec for a containerd pod: this process becomes the plugin's exec.
func Exec(t runtime.ExecTarget, command []string, stdin, tty bool) error {
	argv := []string{t.Plugin, "exec", "--address", t.Address}
	if stdin {
		argv = append(argv, "-i")
	}
	if tty {
		argv = append(argv, "-t")
	}
	argv = append(append(argv, t.ContainerID, "--"), command...)
	return syscall.Exec(t.Plugin, argv, os.Environ())
}
