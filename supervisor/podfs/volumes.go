package podfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// shmSize is /dev/shm's size for a pod, as container runtimes default.
const shmSize = 64 << 20

// volume is a volume prepared on the host.
type volume struct {
	name string
	// path is the host path of the volume's root.
	path string
	// allowedRoot, for a hostPath under security.allowedHostPaths, is the
	// allowed directory path must be resolved beneath, without links:
	// what lies below it is writable by pods and not to be trusted.
	allowedRoot  string
	hostPathType *v1.HostPathType
	// readOnly: configMap, secret, downwardAPI and projected volumes are
	// always mounted read-only, as the kubelet mounts them, so no
	// container can plant a link where the daemon writes.
	readOnly bool
	// atomic: the daemon wrote the volume with the atomic writer; its
	// subPaths are resolved through its own links (key -> ..data/key),
	// beneath the volume.
	atomic bool
}

// setupVolumes prepares a pod's volumes and returns them by name. It is
// idempotent: every container start calls it, and rewrites the object
// volumes from the objects as they are now, as a kubelet sync does.
func (f *FS) setupVolumes(pod *v1.Pod, node runtime.PodEnv) (map[string]volume, error) {
	vols := map[string]volume{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(f.podDir(pod.UID), "volumes", v.Name)
		vol := volume{name: v.Name, path: dir}
		var err error
		switch {
		case v.EmptyDir != nil:
			err = emptyDir(dir, v.EmptyDir)
		case v.HostPath != nil:
			vol.path = filepath.Clean(v.HostPath.Path)
			vol.hostPathType = v.HostPath.Type
			vol.allowedRoot, err = f.prepareHostPath(v.HostPath)
		case atomicVolume(v):
			if _, err := writeAtomicVolume(dir, pod, v, node); err != nil {
				if !hasData(dir) {
					return nil, err // the kubelet's FailedMount, as it is
				}
				// As with the kubelet, a volume set up once stays set up:
				// a container (re)starts with what it holds, the failed
				// update is RefreshObjectVolumes' to report.
				if !errors.Is(err, objects.ErrPending) {
					f.log.Warn("updating a pod volume; it keeps its files", "pod", pod.Namespace+"/"+pod.Name, "volume", v.Name, "err", err)
				}
			}
			vol.readOnly, vol.atomic = true, true
		default:
			err = errors.New("unsupported volume source") // validation rejects these earlier
		}
		if err != nil {
			return nil, fmt.Errorf("volume %q: %w", v.Name, err)
		}
		vols[v.Name] = vol
	}
	return vols, nil
}

func emptyDir(dir string, e *v1.EmptyDirVolumeSource) error {
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return err
	}
	os.Chmod(dir, 0o777) // as the kubelet makes it: any container user may write
	if e.Medium != v1.StorageMediumMemory || isMountPoint(dir) {
		return nil
	}
	opts := "mode=1777"
	if e.SizeLimit != nil && e.SizeLimit.Value() > 0 {
		opts += ",size=" + strconv.FormatInt(e.SizeLimit.Value(), 10)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting tmpfs: %w", err)
	}
	return nil
}

// containerMounts are a container's volume mounts plus the files the
// kubelet gives every container: /etc/hosts, /etc/hostname,
// /etc/resolv.conf and the pod's /dev/shm. A mount with a subPath, or of
// a hostPath under security.allowedHostPaths, is resolved without links
// and handed to the runtime as a bind of the resolved file (stageMount).
// A subPathExpr is expanded with the container's environment env.
func (f *FS) containerMounts(pod *v1.Pod, c *v1.Container, volumes map[string]volume, env []string) ([]runtime.Mount, error) {
	out, err := f.volumeMounts(pod, c, volumes, env)
	if err != nil {
		return nil, err
	}
	files, err := f.podFiles(pod)
	if err != nil {
		return nil, err
	}
	for _, m := range files {
		if m.Destination == etcHosts && mountsOwnHosts(c) {
			continue
		}
		out = append(out, m)
	}
	return out, nil
}

// volumeMounts are a container's volume mounts alone (containerMounts).
func (f *FS) volumeMounts(pod *v1.Pod, c *v1.Container, volumes map[string]volume, env []string) ([]runtime.Mount, error) {
	var out []runtime.Mount
	for i, vm := range c.VolumeMounts {
		vol, ok := volumes[vm.Name]
		if !ok {
			return nil, fmt.Errorf("volumeMount %q: no such volume", vm.Name)
		}
		subPath, err := runtime.SubPath(vm, c, env)
		if err != nil {
			return nil, err
		}
		src := vol.path
		if subPath != "" || vol.allowedRoot != "" {
			staged, err := f.stageMount(pod.UID, c.Name, i, vol, subPath)
			if err != nil {
				f.log.Warn("preparing a volume mount", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name,
					"volumeMount", vm.Name, "subPath", subPath, "err", err)
				// The kubelet's words for subPaths; the details (host
				// paths) go to the device's log only.
				var spe *subPathError
				switch {
				case !errors.As(err, &spe):
					return nil, fmt.Errorf("volume %q: %w", vm.Name, err)
				case spe.create:
					return nil, fmt.Errorf("failed to create subPath directory for volumeMount %q of container %q", vm.Name, c.Name)
				}
				return nil, fmt.Errorf("failed to prepare subPath for volumeMount %q of container %q", vm.Name, c.Name)
			}
			src = staged
		}
		out = append(out, runtime.Mount{Source: src, Destination: vm.MountPath, ReadOnly: vm.ReadOnly || vol.readOnly})
	}
	return out, nil
}

// podFiles writes (once) and mounts the pod's hosts, hostname and shm.
func (f *FS) podFiles(pod *v1.Pod) ([]runtime.Mount, error) {
	dir := f.podDir(pod.UID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	hostname := runtime.PodHostname(pod)
	if pod.Spec.HostNetwork {
		hostname, _ = os.Hostname()
	}
	hosts := filepath.Join(dir, "hosts")
	if err := writePodHosts(hosts, pod, hostname); err != nil {
		return nil, err
	}
	hostnameFile := filepath.Join(dir, "hostname")
	if err := os.WriteFile(hostnameFile, []byte(hostname+"\n"), 0o644); err != nil {
		return nil, err
	}
	mounts := []runtime.Mount{
		{Source: hosts, Destination: etcHosts},
		{Source: hostnameFile, Destination: "/etc/hostname"},
	}
	if _, err := os.Stat("/etc/resolv.conf"); err == nil {
		mounts = append(mounts, runtime.Mount{Source: "/etc/resolv.conf", Destination: "/etc/resolv.conf", ReadOnly: true})
	}
	if !pod.Spec.HostIPC {
		shm := filepath.Join(dir, "shm")
		if err := os.MkdirAll(shm, 0o1777); err != nil {
			return nil, err
		}
		if !isMountPoint(shm) {
			if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=1777,size="+strconv.Itoa(shmSize)); err != nil {
				return nil, fmt.Errorf("mounting the pod's /dev/shm: %w", err)
			}
		}
		mounts = append(mounts, runtime.Mount{Source: shm, Destination: "/dev/shm"})
	}
	return mounts, nil
}
