// Package images is the daemon's side of the runtime that keeps container
// images (runtime.Images): the local API's list, import and removal, the
// archives side-loaded from <data-dir>/images, image garbage collection
// under disk pressure, and the news, for the loop, that images arrived.
package images

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// Options configure the component.
type Options struct {
	// Dir is where archives are dropped to be side-loaded.
	Dir string
	Log *slog.Logger
	// Settle is how long an archive must be quiet (a copy in progress
	// keeps writing) before it is imported.
	Settle time.Duration
	// Now is the clock arrivals are stamped with (default time.Now).
	Now func() time.Time
}

// Arrival is news for the loop: images arrived at At, so the containers
// waiting with one of Reasons may try again now rather than at the end of
// their backoff.
type Arrival struct {
	At      time.Time
	Reasons []string
}

// Failure is a side-loaded archive that could not be imported.
type Failure struct {
	File  string
	Error string
}

// Images manages the images of the runtime that keeps them. Its methods
// may be called from any goroutine.
type Images struct {
	store runtime.Images // nil: no runtime keeps images
	// missing is why there is none.
	missing  error
	opts     Options
	sideload *sideloader
	rescan   chan struct{}
	arrived  chan Arrival
}

// New returns the component for store, the runtime that keeps images;
// without one (nil) its requests fail with missing.
func New(store runtime.Images, missing error, o Options) *Images {
	if o.Now == nil {
		o.Now = time.Now
	}
	m := &Images{store: store, missing: missing, opts: o, rescan: make(chan struct{}, 1), arrived: make(chan Arrival, 1)}
	if store != nil {
		m.sideload = &sideloader{dir: o.Dir, importFile: store.Import, done: m.changed, log: o.Log, settle: o.Settle}
	}
	return m
}

// Start imports the archives dropped into the side-load directory until
// ctx ends.
func (m *Images) Start(ctx context.Context) {
	if m.sideload == nil {
		return
	}
	go func() {
		if err := m.sideload.run(ctx, m.rescan); err != nil {
			m.opts.Log.Error("image side-loading stopped", "dir", m.sideload.dir, "err", err)
		}
	}()
}

// Arrived delivers the arrivals of images, the latest only (nil without
// a runtime that keeps images: never ready).
func (m *Images) Arrived() <-chan Arrival {
	if m == nil {
		return nil
	}
	return m.arrived
}

// Rescan has every side-loaded archive considered again, as after the
// runtime reconnects: what failed to import while it was away.
func (m *Images) Rescan() {
	if m == nil {
		return
	}
	select {
	case m.rescan <- struct{}{}:
	default:
	}
}

// changed tells the loop that images arrived; a pending, older arrival is
// superseded.
func (m *Images) changed() {
	a := Arrival{At: m.opts.Now(), Reasons: m.store.ImageWaitReasons()}
	for {
		select {
		case m.arrived <- a:
			return
		default:
		}
		select {
		case <-m.arrived:
		default:
		}
	}
}

func (m *Images) storeOrMissing() (runtime.Images, error) {
	if m.store == nil {
		return nil, m.missing
	}
	return m.store, nil
}

// List returns the images and the side-loaded archives that failed.
func (m *Images) List() ([]runtime.Image, []Failure, error) {
	s, err := m.storeOrMissing()
	if err != nil {
		return nil, nil, err
	}
	imgs, err := s.Images()
	if err != nil {
		return nil, nil, err
	}
	return imgs, m.sideload.failures(), nil
}

// Import imports an archive on the device and lets the containers waiting
// for an image try again at once.
func (m *Images) Import(path string) ([]string, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("import: %q is not an absolute path on the device", path)
	}
	s, err := m.storeOrMissing()
	if err != nil {
		return nil, err
	}
	names, err := s.Import(path)
	if err != nil {
		return nil, err
	}
	m.changed()
	return names, nil
}

// Remove deletes an unused image.
func (m *Images) Remove(name string) error {
	s, err := m.storeOrMissing()
	if err != nil {
		return err
	}
	return s.RemoveImage(name)
}

// FS is a path on the file system that holds the images ("": unknown or
// none), for the image file system's pressure signal.
func (m *Images) FS() string {
	if m == nil || m.store == nil {
		return ""
	}
	return m.store.ImageFS()
}

// Collect removes unused images when the image file system is fuller
// than the high threshold, down to the low one, as the kubelet's image
// garbage collector does (at every pressure check, not every five
// minutes).
func (m *Images) Collect(obs map[eviction.Signal]eviction.Observation) {
	fs, ok := obs[eviction.ImageFsAvailable]
	if m == nil || m.store == nil || !ok {
		return
	}
	gc := m.store.ImageGC()
	if bytes := eviction.ImageGCBytes(fs, gc.HighThresholdPercent, gc.LowThresholdPercent); bytes > 0 {
		m.store.PruneImages(runtime.PruneArgs{Bytes: bytes, MinAge: gc.MinimumAge})
	}
}

// PruneUnused removes every unused image old enough, under disk pressure.
func (m *Images) PruneUnused() {
	if m != nil && m.store != nil {
		m.store.PruneImages(runtime.PruneArgs{All: true, MinAge: m.store.ImageGC().MinimumAge})
	}
}
