// Package podfs is a pod's file system on the device: its directory under
// the data directory, the volumes prepared there (emptyDir, hostPath,
// downwardAPI, projected), subPaths and allowed hostPaths resolved
// without links and staged as binds, and the files the kubelet gives
// every container (/etc/hosts, /etc/hostname, /etc/resolv.conf,
// /dev/shm). A runtime calls it while it starts a container; the daemon
// calls it to remove what a pod leaves.
package podfs

import (
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Options are what a pod's file system is built from.
type Options struct {
	// DataDir is the daemon's data directory; pods' directories are
	// under its pods/.
	DataDir string
	// AllowedHostPaths, when set, are the only host directories a
	// hostPath volume may name (security.allowedHostPaths): what lies
	// below them is resolved without links.
	AllowedHostPaths []string
	Log              *slog.Logger
}

// FS prepares and removes pods' directories, volumes and files; its
// methods may be called from any goroutine. It keeps no state of its own
// beyond its options: everything is on disk, so a
// restarted daemon finds it again.
type FS struct {
	// mu serialises what writes the object volumes (the atomic writer
	// has no concurrency of its own) and resolves their subPaths.
	mu               sync.Mutex
	dataDir          string
	allowedHostPaths []string
	log              *slog.Logger
}

// New returns the file system of the pods under o.DataDir.
func New(o Options) *FS {
	return &FS{dataDir: o.DataDir, allowedHostPaths: o.AllowedHostPaths, log: o.Log}
}

// MountsFor is what a runtime calls (runtime.Container.Mounts) to prepare
// the pod's volumes and files for container c and get its mounts; node
// is the device the downward API describes.
func (f *FS) MountsFor(pod *v1.Pod, c *v1.Container, node runtime.PodEnv) func(env []string) ([]runtime.Mount, error) {
	return func(env []string) ([]runtime.Mount, error) { return f.Mounts(pod, c, node, env) }
}

// Mounts prepares the pod's volumes and files (idempotent: every
// container start calls it) and returns container c's mounts; env is the
// container's environment, for subPathExpr.
//
// A configMap, secret or projected volume whose object (or key) is missing
// is a *runtime.MountError, the kubelet's FailedMount: the container is
// to wait and be tried again.
func (f *FS) Mounts(pod *v1.Pod, c *v1.Container, node runtime.PodEnv, env []string) ([]runtime.Mount, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	volumes, err := f.setupVolumes(pod, node)
	if err != nil {
		return nil, err
	}
	return f.containerMounts(pod, c, volumes, env)
}

// VolumeMountsFor is Mounts for a container that sees the host's root
// (runtime.Container.VolumeMounts): its volume mounts alone, without
// the files every container of its own root gets.
func (f *FS) VolumeMountsFor(pod *v1.Pod, c *v1.Container, node runtime.PodEnv) func(env []string) ([]runtime.Mount, error) {
	return func(env []string) ([]runtime.Mount, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		volumes, err := f.setupVolumes(pod, node)
		if err != nil {
			return nil, err
		}
		return f.volumeMounts(pod, c, volumes, env)
	}
}

// podDir holds what a pod instance has on the device besides its
// containers: volumes and the files the kubelet would manage (hosts,
// hostname, shm). It lives and dies with the pod UID.
func (f *FS) podDir(uid types.UID) string {
	return filepath.Join(f.dataDir, "pods", string(uid))
}

// RemovePod unmounts the pod's staged mounts, tmpfs volumes and shm and
// deletes its directory.
func (f *FS) RemovePod(uid types.UID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dir := f.podDir(uid)
	if err := cleanStagedMounts(dir); err != nil {
		// Removing the directory now would reach through a bind into a
		// volume or a host directory: leave it, loudly.
		f.log.Error("unmounting a pod's staged volume mounts; its directory is left in place", "dir", dir, "err", err)
		return
	}
	mounts, _ := filepath.Glob(filepath.Join(dir, "volumes", "*"))
	for _, m := range append(mounts, filepath.Join(dir, "shm")) {
		if isMountPoint(m) {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				f.log.Warn("unmounting a pod volume", "path", m, "err", err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		f.log.Warn("removing the pod directory", "dir", dir, "err", err)
	}
}

// isMountPoint reports whether path is mounted on (its device differs
// from its parent's).
func isMountPoint(path string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(path, &st) != nil || unix.Lstat(filepath.Dir(path), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
