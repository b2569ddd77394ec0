package containerd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// A container whose environment holds a Secret's data keeps it out of the
// OCI spec, which containerd stores in its database on disk: the plugin
// writes the container's whole environment to a file on the private tmpfs
// (<data-dir>/private, runtime.EnsureMemoryFS) and starts the container
// through podvisor-shim --exec-env, which reads it and execs the command
// (pluginapi.ContainerConfig.SecretEnv). The file lives until the
// container is removed; a tmpfs, it survives a restart of the daemon.

func (r *Runtime) privateDir() string { return filepath.Join(r.dataDir, runtime.PrivateDir) }

// envFile is where instance id's environment file is.
func (r *Runtime) envFile(instanceID string) string {
	return filepath.Join(r.privateDir(), "ctrd-"+instanceID+".env")
}

// secretEnv sets up cfg for a container whose environment (p) holds a
// Secret's data. An error is the container's CreateContainerConfigError:
// it waits rather than put its Secrets on disk.
func (r *Runtime) secretEnv(cfg *pluginapi.ContainerConfig, p runtime.Process, instanceID string) error {
	if !p.Secret() {
		return nil
	}
	fail := func(err error) error {
		return &runtime.CreateError{Reason: "CreateContainerConfigError",
			Message: fmt.Sprintf("the container's environment holds a Secret's data, kept only on a memory-backed file system at %s: %v", r.privateDir(), err)}
	}
	if len(r.cfg.EnvInit) == 0 {
		return fail(errors.New("no podvisor-shim to start the container with it"))
	}
	size := 0
	for _, kv := range cfg.Env {
		size += len(kv) + 1
	}
	dir := r.privateDir()
	err := os.MkdirAll(dir, 0o700)
	if err == nil {
		err = runtime.EnsureMemoryFS(dir, int64(size)+64<<10) // and the image's
	}
	if err == nil {
		err = os.Chmod(dir, 0o700)
	}
	if err != nil {
		return fail(err)
	}
	for name := range p.SecretEnv {
		cfg.SecretEnv = append(cfg.SecretEnv, name)
	}
	slices.Sort(cfg.SecretEnv)
	cfg.EnvFile, cfg.EnvInit = r.envFile(instanceID), r.cfg.EnvInit
	return nil
}

// removeEnvFile removes a removed container's environment file, if any.
func (r *Runtime) removeEnvFile(instanceID string) {
	for _, f := range []string{r.envFile(instanceID), r.envFile(instanceID) + ".tmp"} {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			r.log.Warn("removing a container's environment file", "instance", instanceID, "err", err)
		}
	}
}
