package supervisor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
)

// imageStore is a runtime that keeps images (containerd).
type imageStore interface {
	Images() ([]containerd.Image, error)
	Import(path string) ([]string, error)
	RemoveImage(name string) error
	// PruneImages removes unused images in the background.
	PruneImages(containerd.PruneArgs)
	ImageGC() containerd.ImageGC
}

// imageRuntime returns the runtime that keeps images once the daemon
// runs: API requests can arrive while it is still starting.
func (d *Daemon) imageRuntime() (imageStore, error) {
	var is imageStore
	if err := d.do(func() error { is = d.images; return nil }); err != nil {
		return nil, err
	}
	if is == nil {
		return nil, containerd.ErrNotConfigured
	}
	return is, nil
}

// Images implements api.Backend.
func (d *Daemon) Images() (api.ImageList, error) {
	c, err := d.imageRuntime()
	if err != nil {
		return api.ImageList{}, err
	}
	imgs, err := c.Images()
	if err != nil {
		return api.ImageList{}, err
	}
	return api.ImageList{Images: imgs, Failed: d.sideload.failures()}, nil
}

// ImportImage implements api.Backend: it imports an archive on the device
// and lets pods waiting for an image try again at once.
func (d *Daemon) ImportImage(path string) ([]string, error) {
	if !filepath.IsAbs(path) {
		return nil, fmt.Errorf("import: %q is not an absolute path on the device", path)
	}
	c, err := d.imageRuntime()
	if err != nil {
		return nil, err
	}
	names, err := c.Import(path)
	if err != nil {
		return nil, err
	}
	d.imagesChanged()
	return names, nil
}

// RemoveImage implements api.Backend.
func (d *Daemon) RemoveImage(name string) error {
	c, err := d.imageRuntime()
	if err != nil {
		return err
	}
	return c.RemoveImage(name)
}

// imagesChanged has the loop retry the containers waiting for an image
// now rather than at the end of their backoff.
func (d *Daemon) imagesChanged() {
	at := time.Now()
	for {
		select {
		case d.newImages <- at:
			return
		default:
		}
		select { // a pending, older signal is superseded
		case <-d.newImages:
		default:
		}
	}
}

// setupSideload starts importing the archives dropped into
// <data-dir>/images.
func (d *Daemon) setupSideload(ctx context.Context) {
	if d.images == nil {
		return
	}
	d.sideload = &sideloader{dir: filepath.Join(d.cfg.DataDir, "images"), importFile: d.images.Import,
		done: d.imagesChanged, log: d.log, settle: 500 * time.Millisecond}
	d.rescanImages = make(chan struct{}, 1)
	go func() {
		if err := d.sideload.run(ctx, d.rescanImages); err != nil {
			d.log.Error("image side-loading stopped", "dir", d.sideload.dir, "err", err)
		}
	}()
}

// sideloader imports the image archives dropped into <data-dir>/images,
// for air-gapped devices. It remembers what it imported (by size and
// modification time) in .imported.json, so an archive is imported once
// and again only when it changes; a failed one is named in
// "podvisor images ls" until it is replaced.
type sideloader struct {
	dir        string
	importFile func(path string) ([]string, error)
	done       func() // after a successful import
	log        *slog.Logger
	settle     time.Duration

	mu    sync.Mutex
	state map[string]sideloaded
}

type sideloaded struct {
	Size    int64     `json:"size"`
	ModTime time.Time `json:"modTime"`
	Names   []string  `json:"names,omitempty"`
	Error   string    `json:"error,omitempty"`
}

const sideloadState = ".imported.json"

// failures lists the archives that could not be imported.
func (s *sideloader) failures() []api.ImportFailure {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []api.ImportFailure
	for file, st := range s.state {
		if st.Error != "" {
			out = append(out, api.ImportFailure{File: filepath.Join(s.dir, file), Error: st.Error})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// run watches the directory and imports new or changed archives once
// they have been quiet for the settle time (a copy in progress keeps
// writing). rescan asks for a full pass, as after containerd reconnects.
func (s *sideloader) run(ctx context.Context, rescan <-chan struct{}) error {
	if err := os.MkdirAll(s.dir, 0o755); err != nil {
		return err
	}
	s.load()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(s.dir); err != nil {
		return err
	}
	s.scan()
	pending := map[string]time.Time{}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rescan:
			s.scan()
		case ev := <-w.Events:
			name := filepath.Base(ev.Name)
			if strings.HasPrefix(name, ".") {
				continue
			}
			pending[name] = time.Now().Add(s.settle)
			timer.Reset(s.settle)
		case err := <-w.Errors:
			s.log.Error("image directory watch", "dir", s.dir, "err", err)
		case <-timer.C:
			next := time.Duration(0)
			for name, at := range pending {
				if wait := time.Until(at); wait > 0 {
					if next == 0 || wait < next {
						next = wait
					}
					continue
				}
				delete(pending, name)
				s.consider(name)
			}
			if next > 0 {
				timer.Reset(next)
			}
		}
	}
}

// scan considers every archive in the directory.
func (s *sideloader) scan() {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		s.log.Error("reading the image directory", "dir", s.dir, "err", err)
		return
	}
	for _, e := range entries {
		if !e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			s.consider(e.Name())
		}
	}
}

// consider imports an archive unless this version of it was imported (or
// failed) already.
func (s *sideloader) consider(name string) {
	path := filepath.Join(s.dir, name)
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		s.mu.Lock()
		delete(s.state, name)
		s.mu.Unlock()
		s.save()
		return
	}
	s.mu.Lock()
	prev, seen := s.state[name]
	s.mu.Unlock()
	if seen && prev.Size == st.Size() && prev.ModTime.Equal(st.ModTime()) {
		return
	}
	rec := sideloaded{Size: st.Size(), ModTime: st.ModTime()}
	names, err := s.importFile(path)
	if errors.Is(err, containerd.ErrNotRunning) {
		return // tried again when containerd is back
	}
	if err != nil {
		rec.Error = err.Error()
		s.log.Error("side-loaded image archive rejected", "file", path, "err", err)
	} else {
		rec.Names = names
		s.log.Info("side-loaded image archive imported", "file", path, "images", strings.Join(names, ", "))
	}
	s.mu.Lock()
	s.state[name] = rec
	s.mu.Unlock()
	s.save()
	if err == nil && s.done != nil {
		s.done()
	}
}

func (s *sideloader) load() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = map[string]sideloaded{}
	data, err := os.ReadFile(filepath.Join(s.dir, sideloadState))
	if err == nil {
		json.Unmarshal(data, &s.state)
	}
}

func (s *sideloader) save() {
	s.mu.Lock()
	data, _ := json.Marshal(s.state)
	s.mu.Unlock()
	tmp := filepath.Join(s.dir, sideloadState+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err == nil {
		os.Rename(tmp, filepath.Join(s.dir, sideloadState))
	}
}

// collectImages removes unused images when the image file system is
// fuller than the high threshold, down to the low one, as the kubelet's
// image garbage collector does (at every pressure check, not every five
// minutes).
func (d *Daemon) collectImages(obs map[eviction.Signal]eviction.Observation) {
	fs, ok := obs[eviction.ImageFsAvailable]
	if d.images == nil || !ok {
		return
	}
	gc := d.images.ImageGC()
	if bytes := eviction.ImageGCBytes(fs, gc.HighThresholdPercent, gc.LowThresholdPercent); bytes > 0 {
		d.images.PruneImages(containerd.PruneArgs{Bytes: bytes, MinAge: gc.MinimumAge})
	}
}

// pruneImages removes every unused image old enough, under disk pressure.
func (d *Daemon) pruneImages() {
	if d.images != nil {
		d.images.PruneImages(containerd.PruneArgs{All: true, MinAge: d.images.ImageGC().MinimumAge})
	}
}
