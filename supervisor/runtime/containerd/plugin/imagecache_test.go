package plugin

import (
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
	"github.com/podvisor/podvisor/test/ociimage"
)

// A restart reads its image from the cache, and the cache follows the
// image: a new image under the same name is read anew, and an image whose
// layers' snapshots were removed is unpacked again.
func TestImageCacheFollowsTheImage(t *testing.T) {
	p, _ := newPlugin(t)
	const image = "podvisor.test/busybox:1"
	importTestImage(t, p, image) // stop signal SIGUSR1
	if run := runSleeper(t, p, "i1", image, pluginapi.Security{}); run.Failure != nil || run.StopSignal != "SIGUSR1" {
		t.Fatalf("first run: %+v, want SIGUSR1", run)
	}
	img, err := p.client.GetImage(p.ctx(), image)
	if err != nil {
		t.Fatal(err)
	}
	info := p.images.get(img)
	if info == nil {
		t.Fatal("the image was not cached by its first run")
	}

	// The same name, another image: read anew.
	archive := filepath.Join(t.TempDir(), "v2.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: image, Cmd: []string{"sh"}, StopSignal: "SIGUSR2"}); err != nil {
		t.Fatal(err)
	}
	var imp pluginapi.ImportReply
	if err := p.Import(pluginapi.ImportArgs{Path: archive}, &imp); err != nil {
		t.Fatal(err)
	}
	if run := runSleeper(t, p, "i2", image, pluginapi.Security{}); run.Failure != nil || run.StopSignal != "SIGUSR2" {
		t.Fatalf("run of the re-imported image: %+v %+v, want its stop signal SIGUSR2", run, run.Failure)
	}

	// Its layers' snapshots removed (by hand, or by containerd's garbage
	// collection of an image removed and brought back): unpacked again.
	for _, id := range []string{"i1", "i2"} {
		if err := p.Remove(pluginapi.IDArgs{ID: id}, &pluginapi.Empty{}); err != nil {
			t.Fatal(err)
		}
	}
	if img, err = p.client.GetImage(p.ctx(), image); err != nil {
		t.Fatal(err)
	}
	if info = p.images.get(img); info == nil {
		t.Fatal("the re-imported image was not cached")
	}
	sn, err := p.snapshotter(p.ctx())
	if err != nil {
		t.Fatal(err)
	}
	// containerd's garbage collection, run as the containers went, may
	// have removed it first: gone either way.
	if err := p.client.SnapshotService(sn).Remove(p.ctx(), info.chainID); err != nil && !errdefs.IsNotFound(err) {
		t.Fatalf("removing the image's snapshot: %v", err)
	}
	if _, err := p.client.SnapshotService(sn).Stat(p.ctx(), info.chainID); !errdefs.IsNotFound(err) {
		t.Fatalf("the image's snapshot after its removal: %v, want not found", err)
	}
	if run := runSleeper(t, p, "i3", image, pluginapi.Security{}); run.Failure != nil {
		t.Fatalf("run after the image's snapshot was removed: %+v", run.Failure)
	}
}
