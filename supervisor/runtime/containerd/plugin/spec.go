package plugin

import (
	"context"
	"errors"
	"fmt"
	"strings"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	seccompsupport "github.com/containerd/containerd/v2/pkg/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// specOpts builds the OCI runtime spec of a container from its image and
// the pod, with Kubernetes' rules, and returns the image's stop signal.
func (p *Plugin) specOpts(img ctrd.Image, info *imageInfo, cfg pluginapi.ContainerConfig) ([]oci.SpecOpts, string, error) {
	ic := info.config
	args := kubernetesArgs(ic.Config.Entrypoint, ic.Config.Cmd, cfg.Command, cfg.Args)
	if len(args) == 0 {
		return nil, "", errors.New("no command specified: the image has no entrypoint or cmd and the container sets none")
	}
	opts := []oci.SpecOpts{
		oci.WithImageConfig(cachedConfig{img.ContentStore(), info}),
		oci.WithProcessArgs(args...),
		oci.WithEnv(cfg.Env),
	}
	if !cfg.HostNetwork && cfg.Hostname != "" {
		opts = append(opts, oci.WithHostname(cfg.Hostname))
	}
	if cfg.WorkingDir != "" {
		opts = append(opts, oci.WithProcessCwd(cfg.WorkingDir))
	}
	opts = append(opts, namespaceOpts(cfg)...)
	opts = append(opts, oci.WithMounts(mounts(cfg.Mounts)))
	sec, err := securityOpts(cfg.Security, seccompsupport.IsEnabled())
	if err != nil {
		return nil, "", err
	}
	opts = append(opts, sec...)
	if cfg.ShimGroup != "" {
		opts = append(opts, oci.WithAnnotations(map[string]string{pluginapi.AnnotationShimGroup: cfg.ShimGroup}))
	}
	if cfg.CgroupsPath != "" {
		opts = append(opts, oci.WithCgroup(cfg.CgroupsPath))
	}
	r := cfg.Resources
	if r.CPUShares > 0 {
		opts = append(opts, oci.WithCPUShares(r.CPUShares))
	}
	if r.CPUQuota > 0 {
		opts = append(opts, oci.WithCPUCFS(r.CPUQuota, r.CPUPeriod))
	}
	if r.MemoryLimit > 0 {
		opts = append(opts, oci.WithMemoryLimit(uint64(r.MemoryLimit)))
	}
	if cfg.OOMScoreAdj != nil {
		score := *cfg.OOMScoreAdj
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			s.Process.OOMScoreAdj = &score
			return nil
		})
	}
	if cfg.Security.RunAsNonRoot {
		// Last, once the image's user and the pod's have been applied.
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			if s.Process.User.UID == 0 {
				return errors.New("container has runAsNonRoot and image will run as root")
			}
			return nil
		})
	}
	if len(cfg.SecretEnv) > 0 {
		// Last: on the final environment, user and command.
		o, err := secretEnvOpt(cfg)
		if err != nil {
			return nil, "", err
		}
		opts = append(opts, o)
	}
	return opts, ic.Config.StopSignal, nil
}

// kubernetesArgs applies Kubernetes' command and args to the image's
// entrypoint and cmd: command replaces the entrypoint and drops the cmd;
// args replace the cmd.
func kubernetesArgs(entrypoint, cmd, command, args []string) []string {
	if len(command) > 0 {
		return append(append([]string{}, command...), args...)
	}
	if len(args) > 0 {
		return append(append([]string{}, entrypoint...), args...)
	}
	return append(append([]string{}, entrypoint...), cmd...)
}

// namespaceOpts joins the pod's namespaces by path, or the host's.
func namespaceOpts(cfg pluginapi.ContainerConfig) []oci.SpecOpts {
	var opts []oci.SpecOpts
	for _, ns := range []struct {
		typ  specs.LinuxNamespaceType
		path string
		host bool
	}{
		{specs.NetworkNamespace, cfg.NetNS, cfg.HostNetwork},
		{specs.UTSNamespace, cfg.UTSNS, cfg.HostNetwork},
		{specs.IPCNamespace, cfg.IPCNS, cfg.HostIPC},
		{specs.PIDNamespace, cfg.PIDNS, cfg.HostPID},
	} {
		switch {
		case ns.host:
			opts = append(opts, oci.WithHostNamespace(ns.typ))
		case ns.path != "":
			opts = append(opts, oci.WithLinuxNamespace(specs.LinuxNamespace{Type: ns.typ, Path: ns.path}))
		}
	}
	return opts
}

func mounts(ms []pluginapi.Mount) []specs.Mount {
	var out []specs.Mount
	for _, m := range ms {
		typ := m.Type
		opts := m.Options
		if typ == "" || typ == "bind" {
			typ = "bind"
			opts = append([]string{"rbind"}, opts...)
		}
		out = append(out, specs.Mount{Source: m.Source, Destination: m.Destination, Type: typ, Options: opts})
	}
	return out
}

// securityOpts maps a Kubernetes security context onto the spec.
// seccompEnabled is whether the kernel filters system calls.
func securityOpts(sc pluginapi.Security, seccompEnabled bool) ([]oci.SpecOpts, error) {
	var opts []oci.SpecOpts
	if sc.Privileged {
		opts = append(opts, oci.WithPrivileged, oci.WithAllDevicesAllowed, oci.WithHostDevices)
	}
	// Drop first: "drop ALL, add NET_BIND_SERVICE" keeps the one added.
	if len(sc.CapDrop) > 0 {
		opts = append(opts, dropCapabilities(capNames(sc.CapDrop)))
	}
	if len(sc.CapAdd) > 0 {
		opts = append(opts, oci.WithAddedCapabilities(capNames(sc.CapAdd)))
	}
	switch {
	case sc.RunAsUser != nil && sc.RunAsGroup != nil:
		opts = append(opts, oci.WithUIDGID(uint32(*sc.RunAsUser), uint32(*sc.RunAsGroup)))
	case sc.RunAsUser != nil:
		opts = append(opts, oci.WithUserID(uint32(*sc.RunAsUser)))
	case sc.RunAsGroup != nil:
		gid := uint32(*sc.RunAsGroup)
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			s.Process.User.GID = gid
			return nil
		})
	}
	if len(sc.SupplementalGroups) > 0 {
		groups := sc.SupplementalGroups
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			for _, g := range groups {
				s.Process.User.AdditionalGids = append(s.Process.User.AdditionalGids, uint32(g))
			}
			return nil
		})
	}
	if sc.ReadOnlyRootFilesystem {
		opts = append(opts, oci.WithRootFSReadonly())
	}
	if sc.NoNewPrivileges {
		opts = append(opts, oci.WithNoNewPrivileges)
	}
	// After the capabilities: the default profile allows what they do.
	seccompOpt, err := seccompOpts(sc, seccompEnabled)
	if err != nil {
		return nil, err
	}
	if seccompOpt != nil {
		opts = append(opts, seccompOpt)
	}
	if len(sc.Sysctls) > 0 {
		sysctls := sc.Sysctls
		opts = append(opts, func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
			if s.Linux.Sysctl == nil {
				s.Linux.Sysctl = map[string]string{}
			}
			for k, v := range sysctls {
				s.Linux.Sysctl[k] = v
			}
			return nil
		})
	}
	return opts, nil
}

// seccompOpts is the container's seccomp filter: the runtime's default
// profile unless the pod asks for Unconfined or a Localhost profile.
// Privileged containers run unconfined, as with the kubelet and
// containerd's CRI. A kernel without seccomp runs the default unconfined,
// but refuses a profile the pod asked for, as containerd's CRI does.
func seccompOpts(sc pluginapi.Security, enabled bool) (oci.SpecOpts, error) {
	if sc.Privileged || sc.Seccomp == "Unconfined" {
		return nil, nil
	}
	if !enabled {
		if sc.Seccomp != "" {
			return nil, errors.New("failed to generate seccomp spec opts: seccomp is not supported")
		}
		return nil, nil
	}
	switch sc.Seccomp {
	case "", "RuntimeDefault":
		return seccomp.WithDefaultProfile(), nil
	case "Localhost":
		if sc.SeccompProfile == "" {
			return nil, errors.New("failed to generate seccomp spec opts: localhost profile not set")
		}
		return seccomp.WithProfile(sc.SeccompProfile), nil
	}
	return nil, fmt.Errorf("failed to generate seccomp spec opts: unsupported seccomp profile type %q", sc.Seccomp)
}

// dropCapabilities drops capabilities; "CAP_ALL" drops every one, as
// Kubernetes' "ALL" does.
func dropCapabilities(caps []string) oci.SpecOpts {
	for _, c := range caps {
		if c == "CAP_ALL" {
			return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
				s.Process.Capabilities = &specs.LinuxCapabilities{}
				return nil
			}
		}
	}
	return oci.WithDroppedCapabilities(caps)
}

// capNames turns Kubernetes capability names (NET_ADMIN) into OCI ones
// (CAP_NET_ADMIN).
func capNames(caps []string) []string {
	out := make([]string, len(caps))
	for i, c := range caps {
		out[i] = "CAP_" + strings.TrimPrefix(strings.ToUpper(c), "CAP_")
	}
	return out
}
