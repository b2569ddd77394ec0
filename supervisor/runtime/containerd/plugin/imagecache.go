package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/content"
	"github.com/containerd/containerd/v2/defaults"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// imageInfo is what creating a container reads of its image: its config,
// the chain ID of its root filesystem (unpacked for the snapshotter) and
// its imageID as the CRI reports it.
type imageInfo struct {
	target     string // digest
	created    time.Time
	configDesc ocispec.Descriptor
	configBlob []byte
	config     ocispec.Image
	chainID    string
	ref        string
}

// imageCache keeps each image's imageInfo, as containerd's CRI keeps image
// configs in its own store: read anew, they cost every restart about
// twenty round trips to containerd (the manifest and config three times
// over, the snapshotter asked whether the image is unpacked). An entry
// serves the image record it was read from: the same name, target and
// creation time. An image pulled, re-tagged or imported anew after being
// removed is another record and is read again.
type imageCache struct {
	mu      sync.Mutex
	entries map[string]*imageInfo // by image name
}

// maxCachedImages bounds the cache: more images than a device keeps.
const maxCachedImages = 64

// get returns the entry of img's record, or nil.
func (c *imageCache) get(img ctrd.Image) *imageInfo {
	meta := img.Metadata()
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.entries[meta.Name]
	if info == nil || info.target != meta.Target.Digest.String() || !info.created.Equal(meta.CreatedAt) {
		return nil
	}
	return info
}

func (c *imageCache) put(name string, info *imageInfo) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil {
		c.entries = map[string]*imageInfo{}
	}
	if _, ok := c.entries[name]; !ok && len(c.entries) >= maxCachedImages {
		for n := range c.entries { // any one: it is read again if used
			delete(c.entries, n)
			break
		}
	}
	c.entries[name] = info
}

func (c *imageCache) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, name)
}

// imageInfo returns img's cached entry, or reads it (img is unpacked) and
// caches it.
func (p *Plugin) imageInfo(ctx context.Context, img ctrd.Image) (*imageInfo, error) {
	if info := p.images.get(img); info != nil {
		return info, nil
	}
	desc, err := img.Config(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the image's config: %w", err)
	}
	blob, err := content.ReadBlob(ctx, img.ContentStore(), desc)
	if err != nil {
		return nil, fmt.Errorf("reading the image's config: %w", err)
	}
	meta := img.Metadata()
	info := &imageInfo{target: meta.Target.Digest.String(), created: meta.CreatedAt, configDesc: desc, configBlob: blob}
	if err := json.Unmarshal(blob, &info.config); err != nil {
		return nil, fmt.Errorf("reading the image's config: %w", err)
	}
	info.chainID = identity.ChainID(info.config.RootFS.DiffIDs).String()
	info.ref = imageRef(ctx, img)
	p.images.put(meta.Name, info)
	return info, nil
}

// withSnapshot prepares a container's root filesystem on its image's
// chain, as ctrd.WithNewSnapshot does without reading the image again,
// resolving the snapshotter each time or asking for its capabilities
// (which matter only to snapshots mapped to a user namespace; podvisor
// maps none). A chain that is gone (its image's layers were removed since
// the entry was read) is unpacked again.
func (p *Plugin) withSnapshot(id, snapshotter string, img ctrd.Image, info *imageInfo) ctrd.NewContainerOpts {
	return func(ctx context.Context, client *ctrd.Client, c *containers.Container) error {
		s := client.SnapshotService(snapshotter)
		_, err := s.Prepare(ctx, id, info.chainID)
		if errdefs.IsNotFound(err) {
			p.images.drop(img.Name())
			if err = p.unpack(ctx, img); err == nil {
				_, err = s.Prepare(ctx, id, info.chainID)
			}
		}
		if err != nil {
			return err
		}
		c.Snapshotter, c.SnapshotKey, c.Image = snapshotter, id, img.Name()
		return nil
	}
}

// snapshotter is the snapshotter's name: the configured one, else the
// namespace's default, resolved once.
func (p *Plugin) snapshotter(ctx context.Context) (string, error) {
	p.snapMu.Lock()
	defer p.snapMu.Unlock()
	if p.snapName != "" {
		return p.snapName, nil
	}
	name := p.cfg.Snapshotter
	if name == "" {
		label, err := p.client.GetLabel(ctx, defaults.DefaultSnapshotterNSLabel)
		if err != nil {
			return "", err
		}
		name = label
		if name == "" {
			name = defaults.DefaultSnapshotter
		}
	}
	p.snapName = name
	return name, nil
}

// cachedConfig is an image for oci.WithImageConfig whose config is served
// from the cache instead of the content store.
type cachedConfig struct {
	content.Store
	info *imageInfo
}

func (c cachedConfig) Config(context.Context) (ocispec.Descriptor, error) {
	return c.info.configDesc, nil
}

func (c cachedConfig) ContentStore() content.Store { return c }

func (c cachedConfig) ReaderAt(ctx context.Context, desc ocispec.Descriptor) (content.ReaderAt, error) {
	if desc.Digest == c.info.configDesc.Digest {
		return blobReader{bytes.NewReader(c.info.configBlob)}, nil
	}
	return c.Store.ReaderAt(ctx, desc)
}

type blobReader struct{ *bytes.Reader }

func (blobReader) Close() error { return nil }
