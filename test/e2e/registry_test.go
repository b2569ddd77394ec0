package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/registrytest"
)

// Pulls from a registry that wants credentials: with the docker
// config.json's credentials the pod runs; with wrong ones (the file is
// read at each pull) the container waits in ErrImagePull, naming the
// refusal, and does not count restarts.
func TestContainerdRegistryPullWithAuth(t *testing.T) {
	authFile := filepath.Join(t.TempDir(), "registry.json")
	d, ctrd := ctrdDaemon(t, ", registryAuthFile: "+authFile)
	registry := registrytest.Start(t, "fleet", "s3cret")
	writeAuth := func(password string) {
		auth := base64.StdEncoding.EncodeToString([]byte("fleet:" + password))
		os.WriteFile(authFile, []byte(fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, registry, auth)), 0o600)
	}

	// Push the test image with containerd's own client, in a namespace of
	// its own.
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: "podvisor.test/pushed:1", Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	ref := registry + "/pv/busybox:1"
	registrytest.PushWithCtr(t, ctrd.Address, archive, "podvisor.test/pushed:1", ref, "fleet:s3cret", "")

	pod := func(name string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  hostNetwork: true
  containers:
  - {name: app, image: %s, imagePullPolicy: Always, command: ["sleep", "1000"]}
`, name, ref)
	}
	writeAuth("s3cret")
	d.write("private.yaml", pod("private"))
	d.waitPod("private", 60*time.Second, running)
	out, err := exec.Command("ctr", "-a", ctrd.Address, "-n", "podvisor", "images", "ls", "-q").Output()
	if err != nil || !strings.Contains(string(out), ref) {
		t.Fatalf("the pulled image is not in podvisor's namespace: %v\n%s", err, out)
	}

	writeAuth("wrong")
	d.write("denied.yaml", pod("denied"))
	p := d.waitPod("denied", 30*time.Second, func(p *v1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ErrImagePull"
	})
	c := p.Status.ContainerStatuses[0]
	if msg := c.State.Waiting.Message; !strings.Contains(msg, "401") && !strings.Contains(strings.ToLower(msg), "unauthorized") {
		t.Fatalf("the refusal is not named: %q", msg)
	}
	if c.RestartCount != 0 {
		t.Fatalf("a failed pull counted restarts: %s", describePod(p))
	}
	if msg := c.State.Waiting.Message; !strings.HasPrefix(msg, fmt.Sprintf("failed to pull and unpack image %q: ", ref)) || strings.Contains(msg, "wrong") {
		t.Fatalf("the refusal is not containerd's CRI message, or shows the password: %q", msg)
	}

	// A pull secret the device does not have: the kubelet's warning, and
	// the pull goes on without it (here with the file's wrong login).
	d.write("unsecret.yaml", strings.Replace(pod("unsecret"), "spec:\n", "spec:\n  imagePullSecrets: [{name: regcred}]\n", 1))
	d.waitEvent("unsecret", "Unable to retrieve some image pull secrets (regcred); attempting to pull the image may not succeed.", 1, 30*time.Second)
	d.waitPod("unsecret", 30*time.Second, func(p *v1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ErrImagePull" && strings.Contains(w.Message, "401 Unauthorized")
	})
	evs, err := d.client.Events(context.Background(), "default", "unsecret")
	if err != nil || len(evs) == 0 || evs[0].Reason != "FailedToRetrieveImagePullSecret" || evs[0].Type != "Warning" {
		t.Fatalf("the first event is not the Warning FailedToRetrieveImagePullSecret: %+v %v", evs, err)
	}
}
