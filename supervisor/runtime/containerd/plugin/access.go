package plugin

import (
	"context"
	"fmt"
	"sync"

	"github.com/distribution/reference"

	"github.com/podvisor/podvisor/supervisor/runtime/containerd/pluginapi"
)

// labelOrigin records where an image's content came from: the plugin
// sets it at every pull and import. An image without it was stored by
// something else (ctr, or a podvisor before origins were recorded).
const labelOrigin = "io.podvisor.origin"

const (
	originPull   = "pull"   // from a registry, for any pod
	originImport = "import" // side-loaded from an archive on the device
)

// mayUse says whether a container limited to access may use a local
// image as it is: any container where access is nil (the device's own
// pods); else an image pulled from a registry, which it could pull
// itself with the same registries and credentials, or one the device
// owner shares. Side-loaded images and those of unknown origin are the
// owner's. A digest does not open them: the device reports every pod's
// imageID (repo@digest) to the hub, file pods' too, so it is no secret.
func mayUse(access *pluginapi.LocalImages, name string, target string, labels map[string]string) bool {
	if access == nil || labels[labelOrigin] == originPull {
		return true
	}
	return shared(access.Shared, name, target)
}

// shared reports whether the image stored as name, whose content is
// target, is one of entries: a repository alone names each of its tags,
// repo:tag that tag, repo@digest (with or without a tag) that content.
func shared(entries []string, name string, target string) bool {
	named, err := reference.ParseNormalizedNamed(name)
	if err != nil {
		return false
	}
	for _, e := range entries {
		entry, err := reference.ParseNormalizedNamed(e)
		if err != nil || entry.Name() != named.Name() {
			continue
		}
		if d, ok := entry.(reference.Digested); ok {
			if d.Digest().String() == target {
				return true
			}
			continue
		}
		if tagged, ok := entry.(reference.Tagged); ok {
			if t, ok := named.(reference.Tagged); ok && t.Tag() == tagged.Tag() {
				return true
			}
			continue
		}
		return true
	}
	return false
}

// pullOver decides whether a pull for a limited container may store its
// image over the local one of the same name (labels and content
// target): over one pulled from a registry, or one the registry holds
// too (resolve gives the registry's digest for the name); never over
// other content, which would change what the owner's pods run.
func pullOver(labels map[string]string, target string, resolve func() (string, error)) error {
	if labels[labelOrigin] == originPull {
		return nil
	}
	remote, err := resolve()
	if err != nil {
		return fmt.Errorf("a local image of this device has that name, not pulled from a registry, and a hub pod's pull never replaces it with other content; its registry could not confirm it is the same: %w", err)
	}
	if remote != target {
		return fmt.Errorf("a local image of this device has that name, not pulled from a registry, and a hub pod's pull never replaces it with other content: the registry's is %s, the local one %s", remote, target)
	}
	return nil
}

// importGate orders imports and hub pods' pulls. Such a pull checks what
// its image would replace (pullOver), and no import may change that
// before the pull ends; an import does not wait for a download either:
// it cancels the pulls in progress, which fail and are tried again (at
// once, as an import wakes the containers waiting for images).
type importGate struct {
	names sync.RWMutex // read: a hub pod's pull; write: an import

	mu      sync.Mutex
	imports int // in progress
	next    int
	pulls   map[int]context.CancelFunc
}

// pull starts a hub pod's pull: ctx ends at an import. Call done when the
// pull has ended.
func (g *importGate) pull(parent context.Context) (ctx context.Context, done func()) {
	g.names.RLock()
	ctx, cancel := context.WithCancel(parent)
	g.mu.Lock()
	if g.imports > 0 { // an import waits for this RLock
		cancel()
	}
	if g.pulls == nil {
		g.pulls = map[int]context.CancelFunc{}
	}
	id := g.next
	g.next++
	g.pulls[id] = cancel
	g.mu.Unlock()
	return ctx, func() {
		g.mu.Lock()
		delete(g.pulls, id)
		g.mu.Unlock()
		cancel()
		g.names.RUnlock()
	}
}

// startImport stops the hub pods' pulls in progress and waits until they
// have ended. Call done when the import has ended.
func (g *importGate) startImport() (done func()) {
	g.mu.Lock()
	g.imports++
	for _, cancel := range g.pulls {
		cancel()
	}
	g.mu.Unlock()
	g.names.Lock()
	return func() {
		g.mu.Lock()
		g.imports--
		g.mu.Unlock()
		g.names.Unlock()
	}
}
