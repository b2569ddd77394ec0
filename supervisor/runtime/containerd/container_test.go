package containerd

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// A container's configuration for the plugin: the image's entrypoint or
// cmd stays where the pod sets none, the image's PATH unless the pod sets
// PATH, the daemon's mounts as binds with their mode, a termination
// message file bound where the container asked, and no cgroup without
// cgroups.
func TestContainerConfig(t *testing.T) {
	r := New(Config{}, t.TempDir(), runtime.Cgroups{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u-1"},
		Spec: v1.PodSpec{HostNetwork: true, HostIPC: true, SecurityContext: &v1.PodSecurityContext{}}}
	for _, tc := range []struct {
		name          string
		command, args []string
		wantCommand   []string
		wantArgs      []string
	}{
		{name: "image's entrypoint and cmd"},
		{name: "args only", args: []string{"-v"}, wantArgs: []string{"-v"}},
		{name: "both", command: []string{"/bin/app", "$(POD)"}, args: []string{"x"}, wantCommand: []string{"/bin/app", "web"}, wantArgs: []string{"x"}},
	} {
		spec := &v1.Container{Name: "app", Image: "busybox", Command: tc.command, Args: tc.args,
			TerminationMessagePath: "/dev/termination-log",
			Env:                    []v1.EnvVar{{Name: "POD", ValueFrom: &v1.EnvVarSource{FieldRef: &v1.ObjectFieldSelector{FieldPath: "metadata.name"}}}}}
		var mountsEnv []string
		c := &runtime.Container{Pod: pod, Spec: spec, InstanceID: "u-1_app_2", Attempt: 2, OOMScoreAdj: 500,
			Cgroup: func() (string, error) { return "", nil },
			Mounts: func(env []string) ([]runtime.Mount, error) {
				mountsEnv = env
				return []runtime.Mount{{Source: "/srv/a", Destination: "/a", ReadOnly: true}, {Source: "/srv/b", Destination: "/b"}}, nil
			}}
		cfg, err := r.containerConfig(c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(cfg.Command, tc.wantCommand) || !slices.Equal(cfg.Args, tc.wantArgs) {
			t.Errorf("%s: command %q args %q, want %q %q", tc.name, cfg.Command, cfg.Args, tc.wantCommand, tc.wantArgs)
		}
		for _, kv := range cfg.Env {
			if strings.HasPrefix(kv, "PATH=") {
				t.Errorf("%s: env %q sets PATH: the image's must stay", tc.name, cfg.Env)
			}
		}
		if !slices.Contains(mountsEnv, "POD=web") {
			t.Errorf("%s: mounts were prepared with env %q, without the container's", tc.name, mountsEnv)
		}
		want := []pluginapi.Mount{
			{Source: "/srv/a", Destination: "/a", Type: "bind", Options: []string{"ro"}},
			{Source: "/srv/b", Destination: "/b", Type: "bind", Options: []string{"rw"}},
			{Source: filepath.Join(r.dataDir, "termination", "u-1_app_2"), Destination: "/dev/termination-log", Type: "bind", Options: []string{"rw"}},
		}
		if len(cfg.Mounts) != len(want) {
			t.Fatalf("%s: mounts %+v, want %+v", tc.name, cfg.Mounts, want)
		}
		for i := range want {
			if m := cfg.Mounts[i]; m.Source != want[i].Source || m.Destination != want[i].Destination || !slices.Equal(m.Options, want[i].Options) {
				t.Errorf("%s: mount %d = %+v, want %+v", tc.name, i, m, want[i])
			}
		}
		if st, err := os.Stat(r.TerminationFile(c.InstanceID)); err != nil || st.Mode().Perm() != 0o666 {
			t.Errorf("%s: termination message file: %v, %v", tc.name, st, err)
		}
		if cfg.OOMScoreAdj == nil || *cfg.OOMScoreAdj != 500 || cfg.CgroupsPath != "" {
			t.Errorf("%s: oom score %v, cgroups path %q", tc.name, cfg.OOMScoreAdj, cfg.CgroupsPath)
		}
		if cfg.Labels[pluginapi.LabelInstance] != "u-1_app_2" || cfg.Labels[pluginapi.LabelAttempt] != "2" {
			t.Errorf("%s: labels %v", tc.name, cfg.Labels)
		}
	}
}

// A stop signal named by an image's STOPSIGNAL, in any of its spellings.
func TestSignalByName(t *testing.T) {
	for in, want := range map[string]syscall.Signal{"SIGUSR1": syscall.SIGUSR1, "USR1": syscall.SIGUSR1, "10": syscall.Signal(10), "SIGNOPE": 0} {
		if got := signalByName(in); got != want {
			t.Errorf("signalByName(%q) = %v, want %v", in, got, want)
		}
	}
}

// A container's supplementary groups are the pod's fsGroup, then its
// supplementalGroups, as the kubelet gives them: the fsGroup lets a
// non-root container read its configMap and secret volumes.
func TestSecurityGroupsIncludeFSGroup(t *testing.T) {
	fsGroup := int64(1001)
	pod := &v1.Pod{Spec: v1.PodSpec{SecurityContext: &v1.PodSecurityContext{FSGroup: &fsGroup, SupplementalGroups: []int64{20, 44}}}}
	if got := securityOf(pod, &v1.Container{}).SupplementalGroups; !slices.Equal(got, []int64{1001, 20, 44}) {
		t.Fatalf("supplementalGroups = %v, want [1001 20 44]", got)
	}
	pod.Spec.SecurityContext.FSGroup = nil
	if got := securityOf(pod, &v1.Container{}).SupplementalGroups; !slices.Equal(got, []int64{20, 44}) {
		t.Fatalf("without fsGroup: supplementalGroups = %v, want [20 44]", got)
	}
}

// A stop signal does not hold its caller (the daemon's loop) while the
// call goes through the plugin: with no plugin up, the call itself waits
// up to callWait and fails, but Signal has returned nil before that,
// its failure only logged.
func TestSignalReturnsAtOnce(t *testing.T) {
	r := New(Config{}, t.TempDir(), runtime.Cgroups{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.client = NewClient([]string{"/nonexistent/podvisor-containerd"}, r.log)
	if err := r.Signal("u-1_app_1", syscall.SIGTERM); err != nil {
		t.Fatalf("Signal waited for the plugin: %v", err)
	}
}
