package containerd

import (
	"errors"
	"github.com/podvisor/podvisor/test/prereq"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// A container with a Secret in its environment gets its env file on the
// private tmpfs and the env init; one without keeps its config as it
// was; without an env init it waits (CreateContainerConfigError) rather
// than put the Secret in the spec. Removal takes the file.
func TestSecretEnvConfig(t *testing.T) {
	prereq.Root(t, "mounts a tmpfs")
	data := t.TempDir()
	t.Cleanup(func() { unix.Unmount(filepath.Join(data, runtime.PrivateDir), unix.MNT_DETACH) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	r := New(Config{EnvInit: []string{"/usr/bin/podvisor-shim", "--exec-env"}}, data, runtime.Cgroups{}, log)

	var plain pluginapi.ContainerConfig
	if err := r.secretEnv(&plain, runtime.Process{Env: []string{"A=1"}}, "u_a_1"); err != nil || plain.EnvFile != "" || plain.SecretEnv != nil || plain.EnvInit != nil {
		t.Fatalf("plain: %v %+v", err, plain)
	}
	var cfg pluginapi.ContainerConfig
	p := runtime.Process{Env: []string{"B=s", "A=s", "C=1"}, SecretEnv: map[string]bool{"B": true, "A": true}}
	if err := r.secretEnv(&cfg, p, "u_a_1"); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(data, "private", "ctrd-u_a_1.env"); cfg.EnvFile != want || !slices.Equal(cfg.SecretEnv, []string{"A", "B"}) || !slices.Equal(cfg.EnvInit, r.cfg.EnvInit) {
		t.Fatalf("config %+v", cfg)
	}
	var st unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(cfg.EnvFile), &st); err != nil || uint32(st.Type) != unix.TMPFS_MAGIC {
		t.Fatalf("%s is not on a tmpfs: %v", filepath.Dir(cfg.EnvFile), err)
	}
	os.WriteFile(cfg.EnvFile, []byte("x"), 0o400)
	r.removeEnvFile("u_a_1")
	if _, err := os.Stat(cfg.EnvFile); !os.IsNotExist(err) {
		t.Fatalf("env file after removal: %v", err)
	}

	r = New(Config{}, data, runtime.Cgroups{}, log)
	var ce *runtime.CreateError
	if err := r.secretEnv(&cfg, p, "u_a_2"); !errors.As(err, &ce) || ce.Reason != "CreateContainerConfigError" {
		t.Fatalf("without an env init: %v", err)
	}
}
