package main

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/podvisor/podvisor/config"
	"github.com/podvisor/podvisor/supervisor"
	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
	"github.com/podvisor/podvisor/supervisor/runtime/process"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// daemonOptions finds on this host what the config leaves to be found —
// the node name (written into the config), the shim, containerd and its
// runtime plugin — and chooses the runtimes: the process runtime, and
// containerd, which also runs the pods that name no runtime class. The
// daemon reads every other setting from the config itself.
func daemonOptions(c *config.Config) (supervisor.Options, error) {
	if c.NodeName == "" {
		host, err := os.Hostname()
		if err != nil {
			return supervisor.Options{}, err
		}
		c.NodeName = host
	}
	shimCmd, err := shimCommand(c)
	if err != nil {
		return supervisor.Options{}, err
	}
	containerdCfg, err := containerdConfig(c, shimCmd)
	if err != nil {
		return supervisor.Options{}, err
	}
	return supervisor.Options{
		Runtimes: []runtime.Choice{
			{Name: process.Name, Settings: process.Settings{ShimCommand: shimCmd, Keeper: c.Process.Keeper}},
			{Name: containerd.Name, Settings: containerdCfg},
		},
		DefaultRuntime: containerd.Name,
		Version:        version,
	}, nil
}

// shimCommand finds the per-container shim: the configured path, else
// podvisor-shim beside this binary, else this binary's own "shim" command
// (which works but costs about 1 MiB more per container).
func shimCommand(c *config.Config) ([]string, error) {
	if c.Shim != "" {
		if _, err := os.Stat(c.Shim); err != nil {
			return nil, c.FieldError("shim", err)
		}
		return []string{c.Shim}, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("finding own binary: %w", err)
	}
	beside := filepath.Join(filepath.Dir(exe), "podvisor-shim")
	if st, err := os.Stat(beside); err == nil && st.Mode()&0o111 != 0 {
		return []string{beside}, nil
	}
	return []string{exe, "shim"}, nil
}

// containerdConfig enables containerd pods where the config names
// containerd, or its default socket exists. They need podvisor-containerd
// (the plugin) and podvisor-shim (the init of a pod's shared PID namespace)
// beside this binary.
func containerdConfig(c *config.Config, shimCmd []string) (containerd.Config, error) {
	cc := c.Containerd
	if _, err := os.Stat(config.DefaultContainerdSocket); err != nil && !c.ContainerdNamed() {
		return containerd.Config{}, nil // no containerd here: process pods only
	}
	// A containerd section in the config means containerd is wanted, even
	// if it is not up yet (podvisor may start first at boot).
	cfg := containerd.Config{Address: c.ContainerdAddress(), Snapshotter: cc.Snapshotter, Runtime: cc.Runtime,
		AuthFile: cc.RegistryAuthFile, CertsDir: cc.RegistryCertsDir, RuncRoot: cc.RuncRoot, NoPivotRoot: cc.NoPivotRoot, SandboxDir: cc.SandboxDir, ShimGroup: cc.ShimGroup,
		CNIConfDir: cc.CNIConfDir, CNIBinDirs: cc.CNIBinDirs, ImageFS: cc.ImageFS, ConnectWait: 5 * time.Second,
		ImageGC: containerd.ImageGC{HighThresholdPercent: cc.ImageGC.HighThresholdPercent,
			LowThresholdPercent: cc.ImageGC.LowThresholdPercent, MinimumAge: cc.ImageGC.MinimumAge.Duration}}
	if cc.Managed {
		bin, err := exec.LookPath("containerd")
		if err != nil {
			return cfg, c.FieldError("containerd.managed", errors.New("containerd is not installed"))
		}
		cfg.Managed = &containerd.Managed{Binary: bin, Root: c.ManagedRoot(), State: cmp.Or(cc.State, config.DefaultManagedState),
			Log: filepath.Join(c.DataDir, "containerd", "containerd.log")}
	}
	if cfg.ImageFS == "" {
		if cfg.Managed != nil {
			cfg.ImageFS = filepath.Dir(cfg.Managed.Root)
		} else if _, err := os.Stat(config.DefaultContainerdRoot); err == nil {
			cfg.ImageFS = config.DefaultContainerdRoot
		}
	}
	plugin := cc.Plugin
	if plugin == "" {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("finding own binary: %w", err)
		}
		plugin = filepath.Join(filepath.Dir(exe), "podvisor-containerd")
	}
	if _, err := os.Stat(plugin); err != nil {
		return cfg, c.FieldError("containerd", fmt.Errorf("the runtime plugin: %w", err))
	}
	if len(shimCmd) != 1 {
		return cfg, c.FieldError("containerd", errors.New("containerd pods need podvisor-shim (their pods' shared PID namespace init) beside podvisor, or the shim setting"))
	}
	cfg.Plugin = []string{plugin}
	cfg.PodInit = []string{shimCmd[0], shim.PodInitFlag}
	cfg.EnvInit = []string{shimCmd[0], shim.ExecEnvFlag}
	return cfg, nil
}
