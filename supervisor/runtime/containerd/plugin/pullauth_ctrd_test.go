package plugin

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/registrytest"
)

// pushAuthenticated stores a test image in the registry under ref, with
// containerd's own client in a namespace of the test's own.
func pushAuthenticated(t *testing.T, p *Plugin, ref, user, password string) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: ref, Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := namespaces.WithNamespace(context.Background(), "pv-push")
	imgs, err := p.client.Import(ctx, f)
	if err != nil || len(imgs) != 1 {
		t.Fatalf("importing the image to push: %v (%d images)", err, len(imgs))
	}
	resolver := p.resolver(func(string) (string, string, error) { return user, password, nil })
	if err := p.client.Push(ctx, ref, imgs[0].Target, ctrd.WithResolver(resolver)); err != nil {
		t.Fatalf("pushing %s: %v", ref, err)
	}
}

// runPull pulls image (policy Always) with auth and runs a container of
// it to its end; it returns the plugin's failure (nil: it ran).
func runPull(t *testing.T, p *Plugin, id, image string, auth pluginapi.PullAuth) *pluginapi.Failure {
	t.Helper()
	cfg := pluginapi.ContainerConfig{ID: id, Labels: map[string]string{pluginapi.LabelInstance: id}, Image: image, PullPolicy: "Always",
		Command: []string{"true"}, LogPath: filepath.Join(t.TempDir(), "0.log")}
	var reply pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg, Pull: auth}, &reply); err != nil {
		t.Fatal(err)
	}
	if reply.Failure == nil {
		var st pluginapi.ExitStatus
		p.Wait(pluginapi.IDArgs{ID: id}, &st)
		if err := p.Remove(pluginapi.IDArgs{ID: id}, &pluginapi.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	return reply.Failure
}

// Pulls from a registry that wants a login, over TLS under a CA of its
// own: the login of the pod's pull secrets is given for that pull only;
// without it, or with a wrong password, the registry's 401 comes back as
// the kubelet's ErrImagePull with containerd's CRI message and no
// password in it; the logins are tried in order; and without the CA in
// the certificates directory the registry is not trusted.
func TestPullWithPullSecretLogins(t *testing.T) {
	const user, password = "fleet", "s3cret-Pa55"
	p, _ := newPlugin(t)
	registry, caFile := registrytest.StartTLS(t, user, password)
	certs := t.TempDir()
	if err := os.MkdirAll(filepath.Join(certs, registry), 0o755); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(caFile)
	os.WriteFile(filepath.Join(certs, registry, "ca.crt"), ca, 0o644)
	p.cfg.CertsDir = certs

	ref := registry + "/pv/app:1"
	pushAuthenticated(t, p, ref, user, password)
	login := func(pass string) pluginapi.Credential { return pluginapi.Credential{Username: user, Password: pass} }
	unauthorized := func(what string, f *pluginapi.Failure) {
		t.Helper()
		if f == nil || f.Reason != pluginapi.ErrImagePull {
			t.Fatalf("%s: %+v, want ErrImagePull", what, f)
		}
		if !strings.HasPrefix(f.Message, fmt.Sprintf("failed to pull and unpack image %q: ", ref)) || !strings.Contains(f.Message, "401 Unauthorized") {
			t.Fatalf("%s: message %q, want containerd's with the registry's 401 Unauthorized", what, f.Message)
		}
		t.Logf("%s: %s: %s", what, f.Reason, f.Message)
		if strings.Contains(f.Message, password) || strings.Contains(f.Message, "wrong-one") {
			t.Fatalf("%s: a password in the message: %q", what, f.Message)
		}
	}

	unauthorized("without a login", runPull(t, p, "anonymous", ref, pluginapi.PullAuth{}))
	unauthorized("with a wrong password", runPull(t, p, "wrong", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login("wrong-one")}}))
	if f := runPull(t, p, "login", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login(password)}}); f != nil {
		t.Fatalf("with the pull secret's login: %+v", f)
	}
	if origin, _ := record(t, p, ref); origin != originPull {
		t.Fatalf("the pulled image's origin %q, want %q", origin, originPull)
	}
	if f := runPull(t, p, "second", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login("wrong-one"), login(password)}}); f != nil {
		t.Fatalf("a wrong login, then the right one: %+v", f)
	}
	f := runPull(t, p, "both-wrong", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login("wrong-one"), {Username: "other", Password: "wrong-one"}}})
	unauthorized("with two wrong logins", f)
	if f := runPull(t, p, "secret-error", ref, pluginapi.PullAuth{Error: `image pull secret "bad": .dockerconfigjson: invalid JSON at offset 10`}); f == nil ||
		f.Reason != pluginapi.ErrImagePull || !strings.Contains(f.Message, `secret "bad"`) {
		t.Fatalf("a malformed pull secret: %+v, want ErrImagePull naming it", f)
	}

	p.cfg.CertsDir = t.TempDir() // the CA is not trusted here
	f = runPull(t, p, "untrusted", ref, pluginapi.PullAuth{Credentials: []pluginapi.Credential{login(password)}})
	if f == nil || f.Reason != pluginapi.ErrImagePull || !strings.Contains(f.Message, "certificate") {
		t.Fatalf("a registry of an untrusted CA: %+v, want a certificate error", f)
	}
}
