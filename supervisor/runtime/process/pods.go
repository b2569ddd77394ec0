package process

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/pod/hostcmd"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// Name is the runtime class of process pods.
const Name = "process"

// BuildSpec turns a container of a pod into a shim Spec (runtime.Resolve
// in the shim's terms).
func BuildSpec(pod *v1.Pod, c *v1.Container, node runtime.PodEnv) (shim.Spec, error) {
	p, err := runtime.Resolve(pod, c, node)
	if err != nil {
		return shim.Spec{}, err
	}
	return specOf(pod, c.Name, p), nil
}

func specOf(pod *v1.Pod, container string, p runtime.Process) shim.Spec {
	return shim.Spec{PodUID: string(pod.UID), PodNamespace: pod.Namespace, PodName: pod.Name, Container: container,
		Argv: p.Argv, Env: p.Env, Dir: p.Dir, UID: p.UID, GID: p.GID, Groups: p.Groups, SecretEnv: p.SecretEnv}
}

// Start runs a container instance under its shim: it is placed in its
// cgroup here, and runs on its own goroutine.
func (r *Runtime) Start(c *runtime.Container, done func(runtime.Started)) {
	s, err := BuildSpec(c.Pod, c.Spec, c.Node)
	if err != nil {
		// Nothing was created: the container waits, as the kubelet keeps
		// one whose configuration it cannot make.
		done(runtime.Started{Err: runtime.ConfigError(err)})
		return
	}
	s.InstanceID, s.Attempt = c.InstanceID, c.Attempt
	if len(s.SecretEnv) > 0 {
		// Its command and environment go to a private spec in memory.
		priv, _ := json.Marshal(shim.PrivateSpec{InstanceID: s.InstanceID, Argv: s.Argv, Env: s.Env})
		if s.PrivateFile, err = r.preparePrivate(s.InstanceID, len(priv)); err != nil {
			done(runtime.Started{Err: err})
			return
		}
	}
	if s.Mounts, err = volumeMounts(c, s.Env); err != nil {
		done(runtime.Started{Err: err})
		return
	}
	s.TerminationLog = c.Spec.TerminationMessagePath != ""
	s.LogPath, s.LogMaxBytes, s.LogMaxFiles = c.LogPath, c.LogMaxBytes, c.LogMaxFiles
	score := c.OOMScoreAdj
	s.OOMScoreAdj = &score
	cgroup, err := c.Cgroup()
	if err != nil {
		done(runtime.Started{Err: err})
		return
	}
	place, err := r.place(c.Spec, cgroup, &s)
	if err != nil {
		done(runtime.Started{Err: err})
		return
	}
	go func() {
		at, err := r.StartPlaced(s, place)
		done(runtime.Started{At: at, Err: err})
	}()
}

// place creates the container's cgroup with the kubelet's limits and
// tells the shim where the container goes. With the systemd driver the
// container's scope can only be made from the shim's pid: the returned
// func, given to StartPlaced, does that.
func (r *Runtime) place(c *v1.Container, path string, s *shim.Spec) (place func(shimPid int) error, err error) {
	drv := r.cgroups.Driver
	if drv == nil || path == "" {
		return nil, nil
	}
	limits := resources.ContainerLimits(c)
	if placer, ok := drv.(cgroups.Placer); ok {
		s.Cgroup = shim.Cgroup{Await: true, Return: []string{filepath.Join(r.cgroups.Mount, r.cgroups.Shims, "cgroup.procs")},
			OOMEvents: filepath.Join(r.cgroups.Mount, path, "memory.events")}
		return func(pid int) error { return placer.Place(path, limits, pid) }, nil
	}
	if err := drv.Ensure(path, limits); err != nil {
		return nil, err
	}
	p := drv.Placement(path)
	s.Cgroup = shim.Cgroup{Dir: p.Dir, Procs: p.Procs}
	if len(p.Procs) > 0 {
		s.Cgroup.Return = drv.Placement(r.cgroups.Shims).Procs
		r.placeUnified(path, &s.Cgroup)
	}
	return nil, nil
}

// placeUnified adds, on a hybrid host, the container's mirror cgroup
// under the cgroup2 mount to the cgroups its shim places it in at its exec
// (and the shims' mirror to those it returns to). The shim is where this
// belongs: the container is in it from its first instruction, so a
// listen() at once is seen, and the daemon neither races the container
// nor moves its processes. A mirror that cannot be made only costs the
// listen-driven probes of the container (they stay periodic).
func (r *Runtime) placeUnified(path string, c *shim.Cgroup) {
	if r.cgroups.Unified == "" {
		return
	}
	dir, shims := filepath.Join(r.cgroups.Unified, path), filepath.Join(r.cgroups.Unified, r.cgroups.Shims)
	for _, d := range []string{dir, shims} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			r.log.Warn("cgroup2 mirror for listen-driven probes", "cgroup", d, "err", err)
			return
		}
	}
	c.Procs = append(c.Procs, filepath.Join(dir, "cgroup.procs"))
	c.Return = append(c.Return, filepath.Join(shims, "cgroup.procs"))
}

// InstanceCgroup is the container's cgroup: a process container keeps it
// across restarts (its shim places each start).
func (r *Runtime) InstanceCgroup(pod *v1.Pod, container, _ string) string {
	return r.cgroups.Layout.Container(r.cgroups.PodCgroup(pod), pod.UID, container)
}

// ExecTarget runs a command on the host in the container's cgroup,
// environment, directory and user.
func (r *Runtime) ExecTarget(pod *v1.Pod, container, instanceID string, node runtime.PodEnv) (runtime.ExecTarget, error) {
	var c *v1.Container
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if list[i].Name == container {
				c = &list[i]
			}
		}
	}
	if c == nil {
		return runtime.ExecTarget{}, fmt.Errorf("container %q not found in pod %q", container, pod.Name)
	}
	// A command runs in the environment the instance started with (its
	// ConfigMaps and Secrets as they were then), as in a container.
	// One whose environment holds a Secret's data has it in its private
	// spec: without it (its tmpfs unmounted), exec fails rather than run
	// in another environment.
	var spec shim.Spec
	if err := shim.ReadJSON(filepath.Join(r.instanceDir(instanceID), shim.SpecFile), &spec); err != nil {
		if spec, err = BuildSpec(pod, c, node); err != nil {
			return runtime.ExecTarget{}, err
		}
	} else if err := shim.ReadPrivate(&spec); err != nil {
		return runtime.ExecTarget{}, err
	}
	t := runtime.ExecTarget{Runtime: Name, Env: spec.Env, Dir: spec.Dir, UID: spec.UID, GID: spec.GID}
	var err error
	if t.MountNSPid, t.MountNSStart, err = r.mountNSLeaderOf(instanceID, spec); err != nil {
		return runtime.ExecTarget{}, err
	}
	if drv := r.cgroups.Driver; drv != nil {
		pl := drv.Placement(r.InstanceCgroup(pod, container, instanceID))
		t.CgroupProcs = pl.Procs
		if pl.Dir != "" {
			t.CgroupProcs = []string{filepath.Join(pl.Dir, "cgroup.procs")}
		}
	}
	return t, nil
}

// StartedProcess is the process an instance started with, from its spec
// (and private spec): probes and hooks run their commands in its
// environment.
func (r *Runtime) StartedProcess(instanceID string) (runtime.Process, error) {
	spec, err := shim.ReadSpec(r.instanceDir(instanceID))
	if err != nil {
		return runtime.Process{}, fmt.Errorf("instance %s: %w", instanceID, err)
	}
	return runtime.Process{Argv: spec.Argv, Env: spec.Env, Dir: spec.Dir, UID: spec.UID, GID: spec.GID, Groups: spec.Groups}, nil
}

// ForgetPod removes the pod's instance directories.
func (r *Runtime) ForgetPod(uid types.UID) {
	for _, k := range r.Kept(string(uid) + "_") {
		if err := r.Remove(k.InstanceID); err != nil {
			r.log.Warn("removing instance", "dir", r.instanceDir(k.InstanceID), "err", err)
		}
	}
}

// Kept lists the instance directories whose names start with prefix,
// with when each instance finished (its exit record's time).
func (r *Runtime) Kept(prefix string) []runtime.Kept {
	entries, _ := os.ReadDir(r.dir)
	var out []runtime.Kept
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		k := runtime.Kept{InstanceID: e.Name()}
		if st, err := os.Stat(filepath.Join(r.dir, e.Name(), shim.ExitFile)); err == nil {
			k.Finished = st.ModTime()
		}
		out = append(out, k)
	}
	return out
}

// Exec runs a command as a target says, the CLI's side of exec for a
// process pod: this process joins the container's cgroup (the command
// inherits it) and the command runs as the container does. It returns
// the command's exit code.
func Exec(t runtime.ExecTarget, command []string, stdin bool) (int, error) {
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, procs := range t.CgroupProcs {
		if err := os.WriteFile(procs, self, 0); err != nil {
			return 1, fmt.Errorf("joining the container's cgroup: %w", err)
		}
	}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env, cmd.Dir = t.Env, t.Dir
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if stdin {
		cmd.Stdin = os.Stdin
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: hostcmd.Credential(t.UID, t.GID)}
	start := func() error {
		if p, err := hostcmd.LookPath(command[0], t.Env); err == nil {
			cmd.Path, cmd.Err = p, nil
		}
		return cmd.Start()
	}
	var err error
	if t.MountNSPid != 0 {
		// The container's volumes are where it sees them.
		ns, nerr := OpenMountNS(t.MountNSPid, t.MountNSStart)
		if nerr != nil {
			return 1, nerr
		}
		err = hostcmd.InMountNS(ns, start)
		ns.Close()
	} else {
		err = start()
	}
	if err == nil {
		err = cmd.Wait()
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode(), nil
	}
	if err != nil {
		return 1, err
	}
	return 0, nil
}
