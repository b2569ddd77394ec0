package images

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

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
func (s *sideloader) failures() []Failure {
	if s == nil {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Failure
	for file, st := range s.state {
		if st.Error != "" {
			out = append(out, Failure{File: filepath.Join(s.dir, file), Error: st.Error})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].File < out[j].File })
	return out
}

// run watches the directory and imports new or changed archives once
// they have been quiet for the settle time (a copy in progress keeps
// writing). rescan asks for a full pass, as after the runtime reconnects.
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
	if errors.Is(err, runtime.ErrUnreachable) {
		return // tried again when the runtime is back (Rescan)
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
