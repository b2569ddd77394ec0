package plugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// A container with a Secret's data in its environment has neither those
// variables nor its command in the spec: the environment file holds the
// whole environment in the spec's order and the command, in
// podvisor-shim's format, owned by the container's user; the spec starts
// the env init on the bound file; an exec reads the environment back.
func TestSecretEnvOpt(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.env")
	cfg := pluginapi.ContainerConfig{SecretEnv: []string{"PW"}, EnvFile: file, EnvInit: []string{"/usr/bin/podvisor-shim", "--exec-env"}}
	opt, err := secretEnvOpt(cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=/bin", "PW=s3cret", "MODE=prod"}
	argv := []string{"/app", "--pw=s3cret"}
	s := &oci.Spec{Process: &specs.Process{Env: slices.Clone(env), Args: slices.Clone(argv), User: specs.User{UID: 1000, GID: 1001}}}
	if err := opt(context.Background(), nil, nil, s); err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin", "MODE=prod"}; !slices.Equal(s.Process.Env, want) {
		t.Fatalf("spec env %q, want %q", s.Process.Env, want)
	}
	if want := []string{pluginapi.EnvInitPath, "--exec-env", pluginapi.EnvFilePath}; !slices.Equal(s.Process.Args, want) {
		t.Fatalf("spec args %q, want %q", s.Process.Args, want)
	}
	if len(s.Mounts) != 2 || s.Mounts[0].Source != cfg.EnvInit[0] || s.Mounts[1].Source != file || !slices.Contains(s.Mounts[1].Options, "ro") {
		t.Fatalf("mounts %+v", s.Mounts)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	gotEnv, gotArgv, err := shim.ParseEnvFile(data)
	if err != nil || !slices.Equal(gotEnv, env) || !slices.Equal(gotArgv, argv) {
		t.Fatalf("file: %q %q %v", gotEnv, gotArgv, err)
	}
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o400 {
		t.Fatalf("file mode: %v %v", st.Mode(), err)
	}
	if os.Getuid() == 0 {
		if uid, gid := ownerOf(t, file); uid != 1000 || gid != 1001 {
			t.Fatalf("file owner %d:%d, want 1000:1001", uid, gid)
		}
	}
	if got, err := readEnvFile(file); err != nil || !slices.Equal(got, env) {
		t.Fatalf("exec env %q %v, want %q", got, err, env)
	}
}

func ownerOf(t *testing.T, path string) (uint32, uint32) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Uid, st.Gid
}
