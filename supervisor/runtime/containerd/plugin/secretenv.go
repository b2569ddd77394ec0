package plugin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// maxEnvFile bounds an environment file read back for an exec.
const maxEnvFile = 2 << 20

// secretEnvOpt keeps a Secret's data out of the spec containerd stores
// (pluginapi.ContainerConfig.SecretEnv): the last of the spec's options,
// it writes the environment the spec would have (the image's, then the
// pod's, in containerd's order) and the command (which may hold a
// Secret's data expanded from $(VAR)) to the environment file, owned by
// the container's user and readable by it alone, drops the Secret's
// variables and the command from the spec and starts the env init, which
// execs that command with that environment in the same process. The
// file's format is podvisor-shim's (shim.FormatEnvFile).
func secretEnvOpt(cfg pluginapi.ContainerConfig) (oci.SpecOpts, error) {
	if len(cfg.EnvInit) == 0 || cfg.EnvFile == "" {
		return nil, errors.New("a Secret's data in the environment needs an environment file and init")
	}
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if err := writeEnvFile(cfg.EnvFile, s.Process.Env, s.Process.Args, int(s.Process.User.UID), int(s.Process.User.GID)); err != nil {
			return err
		}
		s.Process.Env = withoutVars(s.Process.Env, cfg.SecretEnv)
		args := append([]string{pluginapi.EnvInitPath}, cfg.EnvInit[1:]...)
		s.Process.Args = append(args, pluginapi.EnvFilePath)
		s.Mounts = append(s.Mounts,
			specs.Mount{Source: cfg.EnvInit[0], Destination: pluginapi.EnvInitPath, Type: "bind", Options: []string{"rbind", "ro", "nosuid", "nodev"}},
			specs.Mount{Source: cfg.EnvFile, Destination: pluginapi.EnvFilePath, Type: "bind", Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"}})
		return nil
	}, nil
}

// removeEnvFile removes the environment file of a container that was not
// started (the daemon removes a started one's with it).
func removeEnvFile(cfg pluginapi.ContainerConfig) {
	if len(cfg.SecretEnv) > 0 && cfg.EnvFile != "" {
		os.Remove(cfg.EnvFile)
		os.Remove(cfg.EnvFile + ".tmp")
	}
}

// withoutVars is env without the variables named.
func withoutVars(env, names []string) []string {
	drop := map[string]bool{}
	for _, n := range names {
		drop[n] = true
	}
	var out []string
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			out = append(out, kv)
		}
	}
	return out
}

// writeEnvFile writes env and argv to path, mode 0400 and owned by
// uid:gid, replacing it whole: each variable then each argument ending in
// a NUL, an empty entry between the two.
func writeEnvFile(path string, env, argv []string, uid, gid int) error {
	var b bytes.Buffer
	for _, kv := range env {
		b.WriteString(kv)
		b.WriteByte(0)
	}
	b.WriteByte(0)
	for _, a := range argv {
		b.WriteString(a)
		b.WriteByte(0)
	}
	tmp := path + ".tmp"
	os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o400)
	if err != nil {
		return fmt.Errorf("environment file: %w", err)
	}
	_, err = f.Write(b.Bytes())
	if err == nil {
		err = f.Chown(uid, gid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("environment file: %w", err)
	}
	return nil
}

// readEnvFile reads an environment file back (an exec's environment).
func readEnvFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxEnvFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxEnvFile {
		return nil, fmt.Errorf("%s: over %d bytes", path, maxEnvFile)
	}
	var env []string
	for _, kv := range bytes.Split(data, []byte{0}) {
		if len(kv) == 0 { // the environment's end
			return env, nil
		}
		env = append(env, string(kv))
	}
	return nil, fmt.Errorf("%s: not an environment file", path)
}
