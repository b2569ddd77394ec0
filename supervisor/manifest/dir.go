package manifest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"
)

// Invalid is a manifest file that could not be accepted.
type Invalid struct {
	File  string    // path of the file
	Err   error     // what is wrong, naming pod and field
	Since time.Time // when the current error was first seen
}

// State is everything the directory currently asks for.
type State struct {
	Pods    []*v1.Pod // valid pods, and the last valid pods of invalid files
	Invalid []Invalid
}

// Dir watches a manifest directory. A file that turns invalid keeps its last
// accepted pods running: a typo must not take a working service down.
type Dir struct {
	Path string
	// Resync is the period of the full re-list that catches missed events.
	Resync time.Duration
	// Settle is how long a file must be quiet after a write before it is
	// read, so a write in progress is not read half-done.
	Settle time.Duration
	Log    *slog.Logger
	// Now is the clock for Invalid.Since.
	Now func() time.Time

	files   map[string]*fileEntry // by base name
	watcher *fsnotify.Watcher
}

type fileEntry struct {
	sum      [32]byte
	pods     []*v1.Pod // last accepted
	err      error
	errSince time.Time
}

// Ignored reports whether a directory entry is not a manifest. Only names
// ending in .yaml, .yml or .json count, so backups and package-manager
// leftovers (web.yaml.bak, web.yaml.dpkg-old, web.yaml.rpmnew, web.yaml~)
// never load as a second copy of a pod; dotfiles (editor swap files,
// .web.yaml.swp) and emacs autosaves (#web.yaml#) are skipped too.
func Ignored(name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "#") {
		return true
	}
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return false
	}
	return true
}

// Seed records pods accepted before a restart from a file, so that if the
// file is invalid now its pods keep running instead of being stopped.
func (d *Dir) Seed(file string, pods []*v1.Pod) {
	d.init()
	name := filepath.Base(file)
	if d.files[name] == nil {
		d.files[name] = &fileEntry{}
	}
	d.files[name].pods = append(d.files[name].pods, pods...)
}

func (d *Dir) init() {
	if d.files == nil {
		d.files = map[string]*fileEntry{}
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.Now == nil {
		d.Now = time.Now
	}
}

// Load reads the whole directory once and returns the resulting state.
func (d *Dir) Load() (State, error) {
	d.init()
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return State{}, fmt.Errorf("manifest directory %s: %w", d.Path, err)
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || Ignored(e.Name()) {
			continue
		}
		seen[e.Name()] = true
		d.reload(e.Name())
	}
	for name := range d.files {
		if !seen[name] {
			delete(d.files, name) // removed, or seeded for a file now gone
		}
	}
	return d.state(), nil
}

// reload reads one file and reports whether what it asks for changed.
func (d *Dir) reload(name string) bool {
	path := filepath.Join(d.Path, name)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		_, had := d.files[name]
		delete(d.files, name)
		return had
	}
	f := d.files[name]
	if f == nil {
		f = &fileEntry{}
		d.files[name] = f
	}
	if err == nil {
		sum := sha256.Sum256(data)
		if sum == f.sum && f.sum != ([32]byte{}) {
			return false
		}
		f.sum = sum
		var pods []*v1.Pod
		pods, err = Decode(data)
		if err == nil {
			for _, p := range pods {
				Stamp(p, SourceFile, path)
			}
			f.pods, f.err = pods, nil
			d.Log.Info("manifest accepted", "file", path, "pods", len(pods))
			return true
		}
	}
	if f.err == nil || f.err.Error() != err.Error() {
		f.errSince = d.Now()
		d.Log.Error("manifest rejected", "file", path, "err", err)
	}
	f.err = err
	return true
}

// state merges the files in name order; a pod name defined by an earlier
// file makes the later file invalid.
func (d *Dir) state() State {
	names := make([]string, 0, len(d.files))
	for n := range d.files {
		names = append(names, n)
	}
	sort.Strings(names)
	owner := map[string]string{}
	var st State
	for _, n := range names {
		f := d.files[n]
		err := f.err
		since := f.errSince
		var conflict error
		for _, p := range f.pods {
			if other, ok := owner[p.Namespace+"/"+p.Name]; ok {
				conflict = fmt.Errorf("pod %q in namespace %q is already defined in %s", p.Name, p.Namespace, other)
			}
		}
		if conflict != nil {
			err, since = conflict, d.Now()
		} else {
			for _, p := range f.pods {
				owner[p.Namespace+"/"+p.Name] = n
				st.Pods = append(st.Pods, p)
			}
		}
		if err != nil {
			st.Invalid = append(st.Invalid, Invalid{File: filepath.Join(d.Path, n), Err: err, Since: since})
		}
	}
	return st
}

// Watch starts watching the directory. Call it before the initial Load: a
// file written between a listing and the start of a watch would otherwise
// go unseen until the next resync.
func (d *Dir) Watch() error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", d.Path, err)
	}
	if err := w.Add(d.Path); err != nil {
		w.Close()
		return fmt.Errorf("watching %s: %w", d.Path, err)
	}
	d.watcher = w
	return nil
}

// Run sends a new State after every change seen by the watch, and after
// every resync that found one. Watch and Load come first.
func (d *Dir) Run(ctx context.Context, out chan<- State) error {
	d.init()
	if d.watcher == nil {
		if err := d.Watch(); err != nil {
			return err
		}
	}
	w := d.watcher
	defer w.Close()
	resync := time.NewTicker(d.Resync)
	defer resync.Stop()
	pending := map[string]time.Time{} // file → when it may be read
	settle := time.NewTimer(time.Hour)
	settle.Stop()
	// Changes are judged against what Load last returned, which the
	// caller already acts on: a removal right after it must not look like
	// "still nothing".
	last := d.state()
	send := func(st State) {
		if sameState(last, st) {
			return
		}
		last = st
		select {
		case out <- st:
		case <-ctx.Done():
		}
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("manifest watcher closed")
			}
			name := filepath.Base(ev.Name)
			if filepath.Dir(ev.Name) != filepath.Clean(d.Path) || Ignored(name) {
				continue
			}
			if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
				if d.reload(name) {
					send(d.state())
				}
				continue
			}
			pending[name] = time.Now().Add(d.Settle)
			settle.Reset(d.Settle)
		case <-settle.C:
			now := time.Now()
			changed := false
			var next time.Duration
			for name, at := range pending {
				if wait := at.Sub(now); wait > 0 {
					if next == 0 || wait < next {
						next = wait
					}
					continue
				}
				delete(pending, name)
				changed = d.reload(name) || changed
			}
			if next > 0 {
				settle.Reset(next)
			}
			if changed {
				send(d.state())
			}
		case err := <-w.Errors:
			d.Log.Warn("manifest watch error; the resync will catch up", "dir", d.Path, "err", err)
		case <-resync.C:
			st, err := d.Load()
			if err != nil {
				d.Log.Error("manifest resync", "err", err)
				continue
			}
			send(st)
		}
	}
}

func sameState(a, b State) bool {
	if len(a.Pods) != len(b.Pods) || len(a.Invalid) != len(b.Invalid) {
		return false
	}
	for i := range a.Pods {
		if a.Pods[i].UID != b.Pods[i].UID {
			return false
		}
	}
	for i := range a.Invalid {
		if a.Invalid[i].File != b.Invalid[i].File || a.Invalid[i].Err.Error() != b.Invalid[i].Err.Error() {
			return false
		}
	}
	return true
}
