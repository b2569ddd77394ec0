package plugin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/registrytest"
)

// runSleeper runs a sleeping container and returns how its start went;
// the container is removed when the test ends.
func runSleeper(t *testing.T, p *Plugin, id, image string, sec pluginapi.Security) pluginapi.RunReply {
	t.Helper()
	cfg := pluginapi.ContainerConfig{ID: id, Labels: map[string]string{pluginapi.LabelInstance: id},
		Image: image, PullPolicy: "Never", Command: []string{"sleep", "100"}, Security: sec,
		LogPath: filepath.Join(t.TempDir(), "0.log")}
	var run pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg}, &run); err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	t.Cleanup(func() { p.Remove(pluginapi.IDArgs{ID: id}, &pluginapi.Empty{}) })
	return run
}

// A digest-pinned image with imagePullPolicy Never runs from the local
// store, found by digest within its repository; a wrong digest, another
// repository, or an image merely named like the pin are not it.
func TestDigestPinnedImage(t *testing.T) {
	p, _ := newPlugin(t)
	importTestImage(t, p, testImageName)
	var imgs pluginapi.ImagesReply
	if err := p.Images(pluginapi.Empty{}, &imgs); err != nil || len(imgs.Images) != 1 {
		t.Fatalf("images: %+v %v", imgs, err)
	}
	digest := imgs.Images[0].Digest
	// A different image that names itself with busybox's digest.
	archive := filepath.Join(t.TempDir(), "spoof.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: "podvisor.test/spoof@" + digest, Cmd: []string{"sh"}, Env: []string{"PATH=/bin", "SPOOF=1"}}); err != nil {
		t.Fatal(err)
	}
	var imp pluginapi.ImportReply
	if err := p.Import(pluginapi.ImportArgs{Path: archive}, &imp); err != nil {
		t.Fatal(err)
	}
	zero := "sha256:" + strings.Repeat("0", 64)
	for i, tc := range []struct {
		image, failure string
	}{
		{"podvisor.test/busybox@" + digest, ""},
		{"podvisor.test/busybox:any-tag@" + digest, ""},
		{"podvisor.test/busybox@" + zero, pluginapi.ErrImageNeverPull},
		{"podvisor.test/other@" + digest, pluginapi.ErrImageNeverPull},
		{"podvisor.test/spoof@" + digest, pluginapi.ErrImageNeverPull},
	} {
		run := runSleeper(t, p, fmt.Sprintf("d%d", i), tc.image, pluginapi.Security{})
		got := ""
		if run.Failure != nil {
			got = run.Failure.Reason
		}
		if got != tc.failure {
			t.Errorf("%s: failure %+v, want %q", tc.image, run.Failure, tc.failure)
		}
	}
}

const testImageName = "podvisor.test/busybox:1"

// Containers get the runtime's default seccomp profile unless the pod
// asks otherwise; privileged ones and Unconfined run unfiltered; a
// Localhost profile is loaded from its file, and a missing one is a
// CreateContainerError, as with containerd's CRI.
func TestSeccompProfiles(t *testing.T) {
	p, _ := newPlugin(t)
	importTestImage(t, p, testImageName)
	profile := filepath.Join(t.TempDir(), "allow.json")
	if err := os.WriteFile(profile, []byte(`{"defaultAction": "SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		sec     pluginapi.Security
		seccomp string // the Seccomp: line of /proc/<pid>/status; "" for a failure
	}{
		{"unset", pluginapi.Security{}, "2"},
		{"runtime-default", pluginapi.Security{Seccomp: "RuntimeDefault"}, "2"},
		{"unconfined", pluginapi.Security{Seccomp: "Unconfined"}, "0"},
		{"privileged", pluginapi.Security{Privileged: true}, "0"},
		{"localhost", pluginapi.Security{Seccomp: "Localhost", SeccompProfile: profile}, "2"},
		{"localhost-missing", pluginapi.Security{Seccomp: "Localhost", SeccompProfile: profile + ".missing"}, ""},
	} {
		run := runSleeper(t, p, tc.name, testImageName, tc.sec)
		if tc.seccomp == "" {
			if run.Failure == nil || run.Failure.Reason != pluginapi.CreateContainerError || !strings.Contains(run.Failure.Message, "cannot load seccomp profile") {
				t.Errorf("%s: failure %+v, want CreateContainerError naming the profile", tc.name, run.Failure)
			}
			continue
		}
		if run.Failure != nil {
			t.Errorf("%s: %+v", tc.name, run.Failure)
			continue
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", run.Pid))
		if err != nil {
			t.Fatal(err)
		}
		if want := "\nSeccomp:\t" + tc.seccomp + "\n"; !strings.Contains(string(status), want) {
			t.Errorf("%s: /proc/%d/status has no %q:\n%s", tc.name, run.Pid, strings.TrimSpace(want), status)
		}
	}
}

func TestSeccompOptsWithoutKernelSupport(t *testing.T) {
	if opt, err := seccompOpts(pluginapi.Security{}, false); opt != nil || err != nil {
		t.Errorf("unset on a kernel without seccomp: %v %v, want unconfined", opt, err)
	}
	if _, err := seccompOpts(pluginapi.Security{Seccomp: "RuntimeDefault"}, false); err == nil {
		t.Error("RuntimeDefault asked for on a kernel without seccomp was accepted")
	}
	if _, err := seccompOpts(pluginapi.Security{Seccomp: "Localhost"}, true); err == nil {
		t.Error("Localhost without a profile was accepted")
	}
}

// A pull of a digest-pinned reference gets that digest: a pin that no
// longer matches the registry's content fails as ErrImagePull, and what
// was pulled serves the pin afterwards with imagePullPolicy Never, under
// any tag.
func TestDigestPinnedPull(t *testing.T) {
	p, ctrd := newPlugin(t)
	registry := registrytest.Start(t, "", "")
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: "podvisor.test/pushed:1", Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	ref := registry + "/pv/busybox:1"
	for _, args := range [][]string{
		{"images", "import", archive},
		{"images", "tag", "podvisor.test/pushed:1", ref},
		{"images", "push", "--plain-http", ref},
	} {
		if out, err := exec.Command("ctr", append([]string{"-a", ctrd.Address, "-n", "push"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	out, err := exec.Command("ctr", "-a", ctrd.Address, "-n", "push", "images", "ls").Output()
	if err != nil {
		t.Fatal(err)
	}
	var digest string
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == ref {
			digest = f[2]
		}
	}
	if !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("no digest for %s in:\n%s", ref, out)
	}
	zero := "sha256:" + strings.Repeat("0", 64)
	for i, tc := range []struct {
		image, policy, failure string
	}{
		{registry + "/pv/busybox:1@" + zero, "IfNotPresent", pluginapi.ErrImagePull},
		{registry + "/pv/busybox@" + digest, "IfNotPresent", ""},
		{registry + "/pv/busybox:other@" + digest, "Never", ""},
	} {
		cfg := pluginapi.ContainerConfig{ID: fmt.Sprintf("p%d", i), Labels: map[string]string{pluginapi.LabelInstance: fmt.Sprintf("p%d", i)},
			Image: tc.image, PullPolicy: tc.policy, Command: []string{"sleep", "100"}, LogPath: filepath.Join(t.TempDir(), "0.log")}
		var run pluginapi.RunReply
		if err := p.Run(pluginapi.RunArgs{Config: cfg}, &run); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Remove(pluginapi.IDArgs{ID: cfg.ID}, &pluginapi.Empty{}) })
		got := ""
		if run.Failure != nil {
			got = run.Failure.Reason
		}
		if got != tc.failure {
			t.Errorf("%s (%s): failure %+v, want %q", tc.image, tc.policy, run.Failure, tc.failure)
		}
	}
}
