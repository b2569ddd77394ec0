package containerd

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/supervisor/sandbox"
)

// containerConfig resolves a container of a pod for the plugin: its
// process, security, namespaces (the pod's sandbox), mounts and cgroup.
func (r *Runtime) containerConfig(c *runtime.Container) (pluginapi.ContainerConfig, error) {
	pod, spec := c.Pod, c.Spec
	p, err := runtime.Resolve(pod, spec, c.Node)
	if err != nil {
		return pluginapi.ContainerConfig{}, err
	}
	cfg := pluginapi.ContainerConfig{
		ID: ContainerID(c.InstanceID),
		Labels: map[string]string{
			pluginapi.LabelPodName: pod.Name, pluginapi.LabelPodNamespace: pod.Namespace,
			pluginapi.LabelPodUID: string(pod.UID), pluginapi.LabelContainer: spec.Name,
			pluginapi.LabelInstance: c.InstanceID, pluginapi.LabelAttempt: strconv.Itoa(c.Attempt),
		},
		Image: spec.Image, PullPolicy: string(spec.ImagePullPolicy), LocalImages: localImages(c.LocalImages),
		Command: nilIfEmpty(p.Argv[:p.Command]), Args: nilIfEmpty(p.Argv[p.Command:]),
		Env: imageEnv(p.Env, spec), WorkingDir: spec.WorkingDir,
		HostNetwork: pod.Spec.HostNetwork, HostIPC: pod.Spec.HostIPC, HostPID: pod.Spec.HostPID,
		Security: securityOf(pod, spec), ShimGroup: r.shimGroup(pod),
		LogPath: c.LogPath, LogMaxBytes: c.LogMaxBytes, LogMaxFiles: c.LogMaxFiles,
	}
	if cfg.Security.SeccompProfile, err = r.seccompProfilePath(cfg.Security.SeccompProfile); err != nil {
		return cfg, err
	}
	cfg.Hostname = runtime.PodHostname(pod)
	if pod.Spec.HostNetwork {
		cfg.Env = hostNetworkHostname(cfg.Env, spec)
	}
	if err := r.secretEnv(&cfg, p, c.InstanceID); err != nil {
		return cfg, err
	}
	if sb, err := r.sandbox(pod); err != nil {
		return cfg, err
	} else if sb != nil {
		if !pod.Spec.HostNetwork {
			cfg.NetNS, cfg.UTSNS = sb.Path(sandbox.Net), sb.Path(sandbox.UTS)
		}
		if !pod.Spec.HostIPC {
			cfg.IPCNS = sb.Path(sandbox.IPC)
		}
		if sharesPID(pod) {
			if cfg.PIDNS, err = sb.EnsurePID(r.cfg.PodInit); err != nil {
				return cfg, err
			}
		}
	}
	mounts, err := c.Mounts(p.Env)
	if err != nil {
		return cfg, err
	}
	for _, m := range mounts {
		mode := "rw"
		if m.ReadOnly {
			mode = "ro"
		}
		cfg.Mounts = append(cfg.Mounts, pluginapi.Mount{Source: m.Source, Destination: m.Destination, Type: "bind", Options: []string{mode}})
	}
	if m, err := r.terminationMount(spec, c.InstanceID); err != nil {
		return cfg, err
	} else if m != nil {
		cfg.Mounts = append(cfg.Mounts, *m)
	}
	score := c.OOMScoreAdj
	cfg.OOMScoreAdj = &score
	cgroup, err := c.Cgroup()
	if err != nil {
		return cfg, err
	}
	if cgroup != "" {
		_, runcPath := r.cgroups.Layout.Runc(r.cgroups.PodCgroup(pod), cfg.ID)
		cfg.CgroupsPath, cfg.SystemdCgroup = runcPath, r.cgroups.Layout.Systemd
		l := resources.ContainerLimits(spec)
		cfg.Resources = pluginapi.Resources{CPUShares: l.CPUShares, MemoryLimit: l.MemoryMax}
		if l.CPUQuota > 0 {
			cfg.Resources.CPUQuota, cfg.Resources.CPUPeriod = l.CPUQuota, resources.QuotaPeriod
		}
	}
	return cfg, nil
}

// localImages is the plugin's form of a container's limit on local
// images.
func localImages(l *runtime.LocalImages) *pluginapi.LocalImages {
	if l == nil {
		return nil
	}
	return &pluginapi.LocalImages{Shared: l.Shared}
}

// The values of Config.ShimGroup other than the device's one shim.
const (
	shimPerPod       = "pod"
	shimPerContainer = "container"
)

// shimGroup is the containerd shim a pod's containers join: the pod's own
// (its UID) with shimGroup "pod", none ("": a shim of its own) with
// "container", else this daemon's, named by its data directory so that
// two daemons on one containerd (tests, a second data directory) never
// share a shim.
func (r *Runtime) shimGroup(pod *v1.Pod) string {
	switch r.cfg.ShimGroup {
	case shimPerPod:
		return string(pod.UID)
	case shimPerContainer:
		return ""
	}
	sum := sha256.Sum256([]byte(r.dataDir))
	return "podvisor-" + hex.EncodeToString(sum[:6])
}

// sandbox makes (once) the namespaces a pod's containers share; nil when
// the pod uses every one of the host's.
func (r *Runtime) sandbox(pod *v1.Pod) (*sandbox.Sandbox, error) {
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
	sb, err := sandbox.Create(r.cfg.SandboxDir, string(pod.UID), runtime.PodHostname(pod), kinds...)
	if err != nil {
		return nil, err
	}
	return &sb, nil
}

// sharesPID reports whether a pod's containers share one PID namespace.
func sharesPID(pod *v1.Pod) bool {
	return pod.Spec.ShareProcessNamespace != nil && *pod.Spec.ShareProcessNamespace
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
// Resolve expanded command and args into one argv, element by element.
func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// securityOf merges the pod's and the container's security contexts.
func securityOf(pod *v1.Pod, c *v1.Container) pluginapi.Security {
	var s pluginapi.Security
	if psc := pod.Spec.SecurityContext; psc != nil {
		s.RunAsUser, s.RunAsGroup = psc.RunAsUser, psc.RunAsGroup
		s.RunAsNonRoot = psc.RunAsNonRoot != nil && *psc.RunAsNonRoot
		s.SupplementalGroups = runtime.SupplementalGroups(pod)
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

// terminationMount makes a container's termination message file and binds
// it at its terminationMessagePath, as the kubelet does: a new empty file
// per container, mode 0666 whatever the umask, so that a container
// running as any user can write it. Its directory is the root's alone, so
// only the container reaches the file.
func (r *Runtime) terminationMount(c *v1.Container, instanceID string) (*pluginapi.Mount, error) {
	if c.TerminationMessagePath == "" {
		return nil, nil
	}
	path := r.TerminationFile(instanceID)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("termination message directory: %w", err)
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return nil, fmt.Errorf("termination message file %s: %w", path, err)
	}
	err = unix.Fchmod(fd, 0o666)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("termination message file %s: %w", path, err)
	}
	return &pluginapi.Mount{Source: path, Destination: c.TerminationMessagePath, Type: "bind", Options: []string{"rw"}}, nil
}

// removeTerminationFile removes a removed container's file.
func (r *Runtime) removeTerminationFile(instanceID string) {
	if err := os.Remove(r.TerminationFile(instanceID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		r.log.Warn("removing a termination message file", "instance", instanceID, "err", err)
	}
}

// sharedShimCost is the warning for a device-wide shim on containerd 1.x
// ("" where there is none): its runc shim holds its lock through a
// container's whole create and each exec's start, so every container's
// probes, hooks and starts wait behind the others' (docs/containerd.md).
func sharedShimCost(group, version string) string {
	if group == shimPerPod || group == shimPerContainer {
		return ""
	}
	v := strings.TrimPrefix(version, "v")
	if !strings.HasPrefix(v, "1.") {
		return ""
	}
	return "containerd 1.x with one shim for the device: each container's probes, hooks and start wait behind the others' creates and execs; containerd.shimGroup: pod or container avoids it (docs/containerd.md)"
}
