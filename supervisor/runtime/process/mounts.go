package process

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// A process container with volume mounts runs in a mount namespace of its
// own, where each volume is bound at its mountPath (shim.Spec.Mounts); the
// host's mount table never changes. A mountPath must exist on the host:
// podvisor creates nothing on the host's file system for a pod, and an
// overlay that made a missing path appear would hide what is mounted
// below the path it covers. A container whose mountPath is missing waits
// with CreateContainerError (no process runs, no restart is counted) and
// starts once the path is there.

// volumeMounts prepares c's volumes and returns its mounts for the shim,
// parents before what is mounted inside them, as CRI runtimes order them.
// env is the container's environment, for subPathExpr.
func volumeMounts(c *runtime.Container, env []string) ([]shim.Mount, error) {
	if len(c.Spec.VolumeMounts) == 0 {
		return nil, nil
	}
	if c.VolumeMounts == nil {
		return nil, &runtime.CreateError{Reason: "CreateContainerConfigError", Message: "the daemon prepared no volumes for this container"}
	}
	ms, err := c.VolumeMounts(env)
	if err != nil {
		// A volume not set up yet (an object missing) waits as the
		// kubelet's FailedMount, as for a containerd pod.
		return nil, runtime.ConfigError(err)
	}
	if len(ms) != len(c.Spec.VolumeMounts) {
		return nil, &runtime.CreateError{Reason: "CreateContainerConfigError",
			Message: fmt.Sprintf("%d volume mounts prepared for %d volumeMounts", len(ms), len(c.Spec.VolumeMounts))}
	}
	out := make([]shim.Mount, len(ms))
	for i, m := range ms {
		out[i] = shim.Mount{Source: m.Source, Destination: filepath.Clean(m.Destination), ReadOnly: m.ReadOnly}
	}
	if err := checkMountPaths(c.Spec, out, os.Stat); err != nil {
		return nil, &runtime.CreateError{Reason: "CreateContainerError", Message: err.Error()}
	}
	slices.SortStableFunc(out, func(a, b shim.Mount) int { return depth(a.Destination) - depth(b.Destination) })
	return out, nil
}

func depth(path string) int { return strings.Count(path, "/") }

// checkMountPaths says why a container's mounts (in the order of its
// volumeMounts) cannot be bound on this host: a mountPath that does not
// exist, or is a directory where the volume's subPath is a file, or the
// other way round. A mountPath inside another of the container's mounts
// is the shim's to check, once that one is bound.
func checkMountPaths(c *v1.Container, mounts []shim.Mount, stat func(string) (fs.FileInfo, error)) error {
	for i, m := range mounts {
		if below(m.Destination, mounts) {
			continue
		}
		where := mountWhere(c, i, m.Destination)
		dst, err := stat(m.Destination)
		if err != nil {
			return mountPathError(c, i, m.Destination, err)
		}
		src, err := stat(m.Source)
		if err != nil {
			return fmt.Errorf("%s: the volume: %w", where, err)
		}
		switch {
		case src.IsDir() && !dst.IsDir():
			return fmt.Errorf("%s is not a directory on the host, and the volume is one", where)
		case !src.IsDir() && dst.IsDir():
			return fmt.Errorf("%s is a directory on the host, and the volume's subPath is a file", where)
		}
	}
	return nil
}

func mountWhere(c *v1.Container, i int, path string) string {
	return fmt.Sprintf("container %q: volumeMount %q: mountPath %s", c.Name, c.VolumeMounts[i].Name, path)
}

// mountPathError says why a mountPath cannot be stat'ed; a missing one,
// why it is not made.
func mountPathError(c *v1.Container, i int, path string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return missingPathError(mountWhere(c, i, path) + " does not exist on the host: a process container's volumes are bound over existing host paths in a mount namespace of its own, and podvisor creates nothing on the host for them; create it, or mount at a path that exists")
	}
	return fmt.Errorf("%s: %w", mountWhere(c, i, path), err)
}

// The pending reasons of a process pod a mountPath of which is missing
// on the host, or not a directory where a whole volume goes (podvisor's
// own: the kubelet makes mount points inside a container's root).
const (
	ReasonMountPathMissing = "MountPathMissing"
	ReasonMountPathInvalid = "MountPathInvalid"
	// ReasonMountNamespaceUnavailable: the daemon may not make mount
	// namespaces (it runs without CAP_SYS_ADMIN).
	ReasonMountNamespaceUnavailable = "MountNamespaceUnavailable"
)

// missingPathError is a mountPath missing on the host (fs.ErrNotExist).
type missingPathError string

func (e missingPathError) Error() string        { return string(e) }
func (e missingPathError) Is(target error) bool { return target == fs.ErrNotExist }

// AdmitPod refuses a pod whose containers' mountPaths do not exist on
// the host, or are not directories where a whole volume goes: it waits
// Pending, the first such mount named, until they do.
// What a subPath is (a file or a directory) is only known once the
// volume is prepared, so Start checks that.
func (r *Runtime) AdmitPod(pod *v1.Pod) (reason, message string) {
	for _, list := range [][]v1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range list {
			if len(list[i].VolumeMounts) > 0 && !mountCapable() {
				return ReasonMountNamespaceUnavailable, fmt.Sprintf("container %q: a process container's volumes are bound in a mount namespace of its own, which needs CAP_SYS_ADMIN: this daemon runs without it", list[i].Name)
			}
			err := checkHostMountPaths(&list[i], os.Stat)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				return ReasonMountPathMissing, err.Error()
			case err != nil:
				return ReasonMountPathInvalid, err.Error()
			}
		}
	}
	return "", ""
}

// mountCapable reports whether this process (and so the keeper or shim
// it starts) may make mount namespaces: CAP_SYS_ADMIN is effective.
var mountCapable = sync.OnceValue(func() bool {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<unix.CAP_SYS_ADMIN) != 0
		}
	}
	return false
})

// checkHostMountPaths is checkMountPaths before the volumes are prepared:
// a whole volume is a directory; a subPath may be either.
func checkHostMountPaths(c *v1.Container, stat func(string) (fs.FileInfo, error)) error {
	mounts := make([]shim.Mount, len(c.VolumeMounts))
	for i, vm := range c.VolumeMounts {
		mounts[i] = shim.Mount{Destination: filepath.Clean(vm.MountPath)}
	}
	for i, m := range mounts {
		if below(m.Destination, mounts) {
			continue
		}
		vm := c.VolumeMounts[i]
		dst, err := stat(m.Destination)
		if err != nil {
			return mountPathError(c, i, m.Destination, err)
		}
		if vm.SubPath == "" && vm.SubPathExpr == "" && !dst.IsDir() {
			return fmt.Errorf("%s is not a directory on the host, and the volume is one", mountWhere(c, i, m.Destination))
		}
	}
	return nil
}

// below reports whether path lies inside another of the mounts.
func below(path string, mounts []shim.Mount) bool {
	for _, m := range mounts {
		if m.Destination != path && (m.Destination == "/" || strings.HasPrefix(path, m.Destination+"/")) {
			return true
		}
	}
	return false
}

// MountNS opens the mount namespace of a running instance that has one of
// its own (process containers with volumes), for probes and hooks to run
// their commands in; nil, nil: it runs in the host's.
func (r *Runtime) MountNS(instanceID string) (*os.File, error) {
	pid, start, err := r.mountNSLeader(instanceID)
	if err != nil || pid == 0 {
		return nil, err
	}
	return OpenMountNS(pid, start)
}

// mountNSLeader names the leader of an instance that runs in a mount
// namespace of its own, by pid and start time; 0: it has none.
func (r *Runtime) mountNSLeader(instanceID string) (int, uint64, error) {
	var spec shim.Spec
	if err := shim.ReadJSON(filepath.Join(r.instanceDir(instanceID), shim.SpecFile), &spec); err != nil {
		return 0, 0, fmt.Errorf("instance %s: %w", instanceID, err)
	}
	return r.mountNSLeaderOf(instanceID, spec)
}

// mountNSLeaderOf is mountNSLeader for an instance started with spec.
func (r *Runtime) mountNSLeaderOf(instanceID string, spec shim.Spec) (int, uint64, error) {
	if len(spec.Mounts) == 0 {
		return 0, 0, nil
	}
	var st shim.State
	if err := shim.ReadJSON(filepath.Join(r.instanceDir(instanceID), shim.StateFile), &st); err != nil {
		return 0, 0, fmt.Errorf("instance %s has not started: %w", instanceID, err)
	}
	if st.BootID != shim.BootID() {
		return 0, 0, fmt.Errorf("instance %s ran before this boot", instanceID)
	}
	return st.LeaderPid, st.LeaderStart, nil
}

// OpenMountNS opens the mount namespace of process pid if it still is the
// one that started at start (clock ticks since boot).
func OpenMountNS(pid int, start uint64) (*os.File, error) {
	fd, err := pidfd.Open(pid, start)
	if err != nil {
		return nil, fmt.Errorf("the container's process has ended: %w", err)
	}
	defer unix.Close(fd)
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/mnt", pid))
	if err != nil {
		return nil, fmt.Errorf("the container's mount namespace: %w", err)
	}
	// Opened while the pidfd named the process: if it is alive still, the
	// namespace is its own.
	if err := unix.PidfdSendSignal(fd, 0, nil, 0); err != nil {
		ns.Close()
		return nil, fmt.Errorf("the container's process has ended: %w", err)
	}
	return ns, nil
}
