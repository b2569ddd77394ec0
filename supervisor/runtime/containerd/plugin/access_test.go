package plugin

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

const (
	digestA = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
	digestB = "sha256:bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
)

// Which local images a hub pod may use as they are: pulled ones, and the
// owner's shared ones; never a side-loaded or unknown one, whatever
// digest names it.
func TestMayUse(t *testing.T) {
	pulled := map[string]string{labelOrigin: originPull}
	imported := map[string]string{labelOrigin: originImport}
	hub := &pluginapi.LocalImages{Shared: []string{
		"docker.io/library/vendor-tools:2",      // one tag
		"import.local/maps",                     // every tag of a repository
		"registry.local/app@" + digestA,         // one content
		"registry.local/both:1@" + digestB,      // the digest decides
		"docker.io/library/Not A Reference:bad", // ignored
	}}
	for _, tc := range []struct {
		what   string
		access *pluginapi.LocalImages
		name   string
		target string
		labels map[string]string
		want   bool
	}{
		{"the device's own pods use any image", nil, "docker.io/library/vendor-app:1", digestA, nil, true},
		{"a side-loaded image is the owner's", hub, "docker.io/library/vendor-app:1", digestA, imported, false},
		{"one of unknown origin too (ctr, an older podvisor)", hub, "docker.io/library/vendor-app:1", digestA, nil, false},
		{"a pulled image", hub, "docker.io/library/vendor-app:1", digestA, pulled, true},
		{"a pulled image, nothing shared", &pluginapi.LocalImages{}, "docker.io/library/busybox:1", digestA, pulled, true},
		{"a shared tag", hub, "docker.io/library/vendor-tools:2", digestA, imported, true},
		{"another tag of it is not shared", hub, "docker.io/library/vendor-tools:3", digestA, imported, false},
		{"a shared repository: any tag", hub, "import.local/maps:europe", digestA, imported, true},
		{"a shared repository: a digest name", hub, "import.local/maps@" + digestB, digestB, nil, true},
		{"a repository below a shared one is not it", hub, "import.local/maps/extra:1", digestA, imported, false},
		{"a shared content", hub, "registry.local/app:7", digestA, imported, true},
		{"other content of that repository", hub, "registry.local/app:7", digestB, imported, false},
		{"tag and digest: the digest decides", hub, "registry.local/both:9", digestB, imported, true},
		{"tag and digest: the tag alone does not", hub, "registry.local/both:1", digestA, imported, false},
		{"a bad name is nothing shared", hub, "Not A Reference", digestA, imported, false},
	} {
		if got := mayUse(tc.access, tc.name, tc.target, tc.labels); got != tc.want {
			t.Errorf("%s: mayUse(%s) = %v, want %v", tc.what, tc.name, got, tc.want)
		}
	}
}

// A hub pod's pull replaces a local image of the same name only if it
// was pulled, or if the registry holds the very same content.
func TestPullOver(t *testing.T) {
	asked := 0
	registry := func(d string, err error) func() (string, error) {
		return func() (string, error) { asked++; return d, err }
	}
	if err := pullOver(map[string]string{labelOrigin: originPull}, digestA, registry(digestB, nil)); err != nil || asked != 0 {
		t.Errorf("over a pulled image: %v (registry asked %d times), want allowed without asking", err, asked)
	}
	if err := pullOver(map[string]string{labelOrigin: originImport}, digestA, registry(digestA, nil)); err != nil {
		t.Errorf("over a side-loaded image the registry holds too: %v, want allowed", err)
	}
	err := pullOver(map[string]string{labelOrigin: originImport}, digestA, registry(digestB, nil))
	if err == nil || !strings.Contains(err.Error(), "never replaces it with other content") || !strings.Contains(err.Error(), digestB) {
		t.Errorf("over other content: %v, want a refusal naming the registry's digest", err)
	}
	err = pullOver(nil, digestA, registry("", errors.New("podvisor.test: no such host")))
	if err == nil || !strings.Contains(err.Error(), "no such host") {
		t.Errorf("over an image of unknown origin, registry unreachable: %v, want a refusal with the registry's error", err)
	}
}

// An import cancels the hub pods' pulls in progress and waits for them to
// end; a pull that starts while an import waits is cancelled at once; a
// pull after the import runs. Channels order every step: no timing.
func TestImportGate(t *testing.T) {
	var g importGate
	ctx1, done1 := g.pull(context.Background())
	imported := make(chan struct{})
	go func() {
		end := g.startImport()
		close(imported)
		end()
	}()
	<-ctx1.Done() // the import cancelled the pull in progress
	select {
	case <-imported:
		t.Fatal("the import ran before the cancelled pull had ended")
	default:
	}
	done1()
	<-imported
	ctx2, done2 := g.pull(context.Background())
	if ctx2.Err() != nil {
		t.Fatalf("a pull after the import was cancelled: %v", ctx2.Err())
	}
	done2()

	// A pull registered while an import is counted (it got its read lock
	// first) is cancelled as it starts.
	g.mu.Lock()
	g.imports++
	g.mu.Unlock()
	ctx3, done3 := g.pull(context.Background())
	if ctx3.Err() == nil {
		t.Fatal("a pull that started during an import was not cancelled")
	}
	done3()
}
