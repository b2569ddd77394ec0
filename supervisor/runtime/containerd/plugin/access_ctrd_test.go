package plugin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
	"github.com/podvisor/podvisor/test/registrytest"
)

// importImage side-loads an image through the plugin, with a /bin/licence
// file of the given text, so that two texts make two contents.
func importImage(t *testing.T, p *Plugin, name, licence string) {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "licence")
	os.WriteFile(key, []byte(licence+"\n"), 0o644)
	archive := filepath.Join(dir, "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: name, Cmd: []string{"sh"}, Files: map[string]string{"licence": key}}); err != nil {
		t.Fatal(err)
	}
	if err := p.Import(pluginapi.ImportArgs{Path: archive}, &pluginapi.ImportReply{}); err != nil {
		t.Fatal(err)
	}
}

// record is an image's origin label and content digest in containerd.
func record(t *testing.T, p *Plugin, name string) (origin, target string) {
	t.Helper()
	img, err := p.client.ImageService().Get(p.ctx(), name)
	if err != nil {
		t.Fatalf("image %s: %v", name, err)
	}
	return img.Labels[labelOrigin], img.Target.Digest.String()
}

// runLimited starts a container printing its image's licence and returns the
// plugin's failure (nil: it ran, and is removed again).
func runLimited(t *testing.T, p *Plugin, id, image, policy string, access *pluginapi.LocalImages) *pluginapi.Failure {
	t.Helper()
	cfg := pluginapi.ContainerConfig{ID: id, Labels: map[string]string{pluginapi.LabelInstance: id}, Image: image, PullPolicy: policy,
		LocalImages: access, Command: []string{"cat", "/bin/licence"}, LogPath: filepath.Join(t.TempDir(), "0.log")}
	var reply pluginapi.RunReply
	if err := p.Run(pluginapi.RunArgs{Config: cfg}, &reply); err != nil {
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

// A hub pod cannot name the device owner's side-loaded image, by name
// or by digest, with any pull policy; nothing is created for it, and the
// owner's image stays as it was. The owner's own pods use it, and a hub
// pod uses one the owner shares.
func TestHubPodCannotUseSideloadedImages(t *testing.T) {
	p, _ := newPlugin(t)
	const private, shared = "podvisor.test/vendor-app:1", "podvisor.test/tools:2"
	// Named on a registry address that refuses connections: a pull of it
	// fails at once, and tells whether the plugin tried one.
	const unreachable = "127.0.0.1:1/vendor/app:1"
	importImage(t, p, private, "KEY-PRIVATE")
	importImage(t, p, shared, "KEY-SHARED")
	importImage(t, p, unreachable, "KEY-UNREACHABLE")
	origin, digest := record(t, p, private)
	if origin != originImport {
		t.Fatalf("a side-loaded image's origin label is %q, want %q", origin, originImport)
	}
	hub := &pluginapi.LocalImages{Shared: []string{"podvisor.test/tools"}}

	for _, tc := range []struct{ image, policy, reason, says string }{
		{private, "Never", pluginapi.ErrImageNeverPull, "not in hub.images.shared"},
		{"podvisor.test/vendor-app@" + digest, "Never", pluginapi.ErrImageNeverPull, "not in hub.images.shared"},
		{"podvisor.test/vendor-app:1@" + digest, "Never", pluginapi.ErrImageNeverPull, "not in hub.images.shared"},
		{unreachable, "IfNotPresent", pluginapi.ErrImagePull, "a hub pod's pull never replaces it with other content"},
		{unreachable, "Always", pluginapi.ErrImagePull, "a hub pod's pull never replaces it with other content"},
	} {
		f := runLimited(t, p, "hub", tc.image, tc.policy, hub)
		if f == nil || f.Reason != tc.reason || !strings.Contains(f.Message, tc.says) {
			t.Errorf("a hub pod with %s (%s): failure %+v, want %s saying %q", tc.image, tc.policy, f, tc.reason, tc.says)
		}
	}
	var list pluginapi.ListReply
	if err := p.List(pluginapi.Empty{}, &list); err != nil || len(list.Containers) != 0 {
		t.Fatalf("containers after the refusals: %+v %v, want none", list.Containers, err)
	}
	for _, name := range []string{private, unreachable} {
		if o, _ := record(t, p, name); o != originImport {
			t.Errorf("%s: origin %q after the refusals, want it side-loaded still", name, o)
		}
	}

	if f := runLimited(t, p, "own", private, "Never", nil); f != nil {
		t.Errorf("the owner's pod with its own image: %+v", f)
	}
	if f := runLimited(t, p, "shared", shared, "Never", hub); f != nil {
		t.Errorf("a hub pod with a shared image, Never: %+v", f)
	}
	if f := runLimited(t, p, "shared2", shared, "IfNotPresent", hub); f != nil {
		t.Errorf("a hub pod with a shared image, IfNotPresent: %+v", f)
	}
}

// push stores an image in the registry, through a namespace of the test's
// own, and returns the archive it was made from.
func push(t *testing.T, ctrd *ctrdtest.Containerd, ref, licence string) string {
	t.Helper()
	dir := t.TempDir()
	key := filepath.Join(dir, "licence")
	os.WriteFile(key, []byte(licence+"\n"), 0o644)
	archive := filepath.Join(dir, "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: ref, Cmd: []string{"sh"}, Files: map[string]string{"licence": key}}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"images", "import", archive}, {"images", "push", "--plain-http", ref}} {
		if out, err := exec.Command("ctr", append([]string{"-a", ctrd.Address, "-n", "push"}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	return archive
}

// Pulls for hub pods: a pulled image is the hub's to use, Never included;
// a pull never replaces a side-loaded image of the same name with other
// content, and takes one over (labelled pulled) when the registry holds
// that very content, as after an upgrade from a podvisor that did not
// label its pulls. An import takes the name back.
func TestHubPodPulls(t *testing.T) {
	p, ctrd := newPlugin(t)
	registry := registrytest.Start(t, "", "")
	hub := &pluginapi.LocalImages{}
	app := registry + "/fleet/app:1"
	archive := push(t, ctrd, app, "PUBLIC")

	if f := runLimited(t, p, "pull", app, "IfNotPresent", hub); f != nil {
		t.Fatalf("a hub pod's pull: %+v", f)
	}
	origin, pulled := record(t, p, app)
	if origin != originPull {
		t.Fatalf("a pulled image's origin %q, want %q", origin, originPull)
	}
	var list pluginapi.ImagesReply
	if err := p.Images(pluginapi.Empty{}, &list); err != nil || len(list.Images) != 1 || list.Images[0].Origin != originPull {
		t.Fatalf("images listed: %+v %v, want the pulled one with its origin", list.Images, err)
	}
	if f := runLimited(t, p, "never", app, "Never", hub); f != nil {
		t.Fatalf("a hub pod with the image pulled for it, Never: %+v", f)
	}

	// The owner side-loads other content under the name: it is theirs.
	importImage(t, p, app, "PRIVATE")
	origin, private := record(t, p, app)
	if origin != originImport || private == pulled {
		t.Fatalf("after the import: origin %q, digest %s (the pulled one %s); want side-loaded, other content", origin, private, pulled)
	}
	if f := runLimited(t, p, "never2", app, "Never", hub); f == nil || f.Reason != pluginapi.ErrImageNeverPull {
		t.Fatalf("a hub pod with the side-loaded image, Never: %+v, want ErrImageNeverPull", f)
	}
	f := runLimited(t, p, "ifnp", app, "IfNotPresent", hub)
	if f == nil || f.Reason != pluginapi.ErrImagePull || !strings.Contains(f.Message, pulled) {
		t.Fatalf("a hub pod with the side-loaded image, IfNotPresent: %+v, want ErrImagePull naming the registry's digest", f)
	}
	if origin, d := record(t, p, app); origin != originImport || d != private {
		t.Fatalf("the owner's image was replaced: origin %q, digest %s, want %q %s", origin, d, originImport, private)
	}

	// The same content as the registry's, side-loaded (or pulled by an
	// older podvisor): confirmed, and the hub pod runs it.
	if err := p.Import(pluginapi.ImportArgs{Path: archive}, &pluginapi.ImportReply{}); err != nil {
		t.Fatal(err)
	}
	if f := runLimited(t, p, "confirmed", app, "IfNotPresent", hub); f != nil {
		t.Fatalf("a hub pod with a local image the registry holds too: %+v", f)
	}
	if origin, d := record(t, p, app); origin != originPull || d != pulled {
		t.Fatalf("after the confirming pull: origin %q, digest %s; want %q %s", origin, d, originPull, pulled)
	}
}
