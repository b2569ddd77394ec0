package supervisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/safepath"
)

// podDir holds what a pod instance has on the device besides its
// containers: volumes and the files the kubelet would manage (hosts,
// hostname, shm). It lives and dies with the pod UID.
func (d *Daemon) podDir(uid types.UID) string {
	return filepath.Join(d.cfg.DataDir, "pods", string(uid))
}

// shmSize is /dev/shm's size for a pod, as container runtimes default.
const shmSize = 64 << 20

// podVolume is a volume prepared on the host.
type podVolume struct {
	name string
	// path is the host path of the volume's root.
	path string
	// allowedRoot, for a hostPath under security.allowedHostPaths, is the
	// allowed directory path must be resolved beneath, without links:
	// what lies below it is writable by pods and not to be trusted.
	allowedRoot  string
	hostPathType *v1.HostPathType
	// readOnly: downwardAPI and projected volumes are always mounted
	// read-only, as the kubelet mounts them, so no container can plant a
	// link where the daemon writes.
	readOnly bool
}

// setupVolumes prepares a pod's volumes and returns them by name. It is
// idempotent: every container start calls it.
func (d *Daemon) setupVolumes(pod *v1.Pod) (map[string]podVolume, error) {
	vols := map[string]podVolume{}
	for _, v := range pod.Spec.Volumes {
		dir := filepath.Join(d.podDir(pod.UID), "volumes", v.Name)
		vol := podVolume{name: v.Name, path: dir}
		var err error
		switch {
		case v.EmptyDir != nil:
			err = emptyDir(dir, v.EmptyDir)
		case v.HostPath != nil:
			vol.path = filepath.Clean(v.HostPath.Path)
			vol.hostPathType = v.HostPath.Type
			vol.allowedRoot, err = d.prepareHostPath(v.HostPath)
		case v.DownwardAPI != nil:
			err = d.writeDownwardAPI(dir, pod, v.DownwardAPI.Items)
			vol.readOnly = true
		case v.Projected != nil:
			var items []v1.DownwardAPIVolumeFile
			for _, s := range v.Projected.Sources {
				if s.DownwardAPI != nil {
					items = append(items, s.DownwardAPI.Items...)
				}
			}
			err = d.writeDownwardAPI(dir, pod, items)
			vol.readOnly = true
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

// writeDownwardAPI writes the pod fields a downwardAPI volume asks for.
func (d *Daemon) writeDownwardAPI(dir string, pod *v1.Pod, items []v1.DownwardAPIVolumeFile) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := safepath.OpenTrusted(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	for _, it := range items {
		var val string
		if it.ResourceFieldRef != nil {
			// A volume's item names its container (validation requires it).
			var err error
			if val, err = runtime.ResourceValue(it.ResourceFieldRef, pod, &v1.Container{}, d.node.Allocatable); err != nil {
				return fmt.Errorf("item %s: %w", it.Path, err)
			}
		} else if it.FieldRef == nil {
			return fmt.Errorf("item %s: a fieldRef or resourceFieldRef is required", it.Path)
		}
		switch {
		case it.FieldRef == nil:
		case it.FieldRef.FieldPath == "metadata.labels":
			val = formatMap(pod.Labels)
		case it.FieldRef.FieldPath == "metadata.annotations":
			val = formatMap(pod.Annotations)
		default:
			var err error
			if val, err = runtime.FieldValue(pod, it.FieldRef.FieldPath, d.node); err != nil {
				return fmt.Errorf("item %s: %w", it.Path, err)
			}
		}
		// Written through descriptors: a link in the volume is refused,
		// never written through.
		if err := safepath.WriteFile(root, strings.TrimPrefix(filepath.Clean("/"+it.Path), "/"), []byte(val), 0o644); err != nil {
			return fmt.Errorf("item %s: %w", it.Path, err)
		}
	}
	return nil
}

// formatMap is the downward API's key="value" lines, sorted.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q\n", k, m[k])
	}
	return b.String()
}

// containerMounts are a container's volume mounts plus the files the
// kubelet gives every container: /etc/hosts, /etc/hostname,
// /etc/resolv.conf and the pod's /dev/shm. A mount with a subPath, or of
// a hostPath under security.allowedHostPaths, is resolved without links
// and handed to the runtime as a bind of the resolved file (stageMount).
// A subPathExpr is expanded with the container's environment env.
func (d *Daemon) containerMounts(pod *v1.Pod, c *v1.Container, volumes map[string]podVolume, env []string) ([]runtime.Mount, error) {
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
			staged, err := d.stageMount(pod.UID, c.Name, i, vol, subPath)
			if err != nil {
				d.log.Warn("preparing a volume mount", "pod", pod.Namespace+"/"+pod.Name, "container", c.Name,
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
	files, err := d.podFiles(pod)
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Destination == etcHosts && mountsOwnHosts(c) {
			continue
		}
		out = append(out, f)
	}
	return out, nil
}

// podFiles writes (once) and mounts the pod's hosts, hostname and shm.
func (d *Daemon) podFiles(pod *v1.Pod) ([]runtime.Mount, error) {
	dir := d.podDir(pod.UID)
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

// removePodDir unmounts the pod's staged mounts, tmpfs volumes and shm
// and deletes its directory.
func (d *Daemon) removePodDir(uid types.UID) {
	dir := d.podDir(uid)
	if err := cleanStagedMounts(dir); err != nil {
		// Removing the directory now would reach through a bind into a
		// volume or a host directory: leave it, loudly.
		d.log.Error("unmounting a pod's staged volume mounts; its directory is left in place", "dir", dir, "err", err)
		return
	}
	mounts, _ := filepath.Glob(filepath.Join(dir, "volumes", "*"))
	for _, m := range append(mounts, filepath.Join(dir, "shm")) {
		if isMountPoint(m) {
			if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
				d.log.Warn("unmounting a pod volume", "path", m, "err", err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		d.log.Warn("removing the pod directory", "dir", dir, "err", err)
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
