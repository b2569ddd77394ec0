package manifest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

// Invalid is a manifest file that could not be accepted.
type Invalid struct {
	File  string    // path of the file
	Err   error     // what is wrong, naming pod and field
	Since time.Time // when the current error was first seen
}

// State is everything the directory currently asks for.
type State struct {
	Pods []*v1.Pod // valid pods, and the last valid pods of invalid files
	// Objects are the ConfigMaps and Secrets the files give the static
	// pods: the valid ones, and the last valid version of one whose
	// document turned invalid.
	Objects []*objects.Object
	Invalid []Invalid
}

// Dir watches a manifest directory. A file that turns invalid keeps its last
// accepted pods running: a typo must not take a working service down. A read
// that would stop pods (the file empty, undecodable, holding fewer pods, or
// renamed away) counts only once the file has stayed that way for Confirm:
// an editor or "cat >" rewriting a file in place passes through such
// states. Deleting a file removes its pods at once.
type Dir struct {
	Path string
	// Resync is the period of the full re-list that catches missed events.
	Resync time.Duration
	// Settle is how long a file must be quiet after a write before it is
	// read, so a write in progress is not read half-done.
	Settle time.Duration
	// Confirm is how long a read that would stop pods must stay the same
	// before it counts (default DefaultConfirm).
	Confirm time.Duration
	Log     *slog.Logger
	// AllowUntrusted reads manifests that someone other than root or
	// the daemon's user could have written (security.
	// allowUntrustedManifests), with a warning, instead of refusing them.
	AllowUntrusted bool
	// Now is the clock for Invalid.Since and the Confirm wait.
	Now func() time.Time
	// MaxObjects and MaxObjectBytes bound the objects of the whole
	// directory, in file name order (0: no bound); an object past them
	// is refused with an error on its file.
	MaxObjects     int
	MaxObjectBytes int64

	files map[string]*fileEntry // by base name
	due   map[string]time.Time  // files to read again, and when
	// unlinked: files whose last event was a deletion, which is deliberate
	// and acted on at once; a file renamed away (an editor keeping a
	// backup before it writes the new file) or missing at a re-list is
	// confirmed first.
	unlinked map[string]bool
	noted    map[string]string // what was last logged about a skipped or untrusted file or directory
	watcher  *fsnotify.Watcher
}

// DefaultConfirm is Dir.Confirm's default.
const DefaultConfirm = time.Second

type fileEntry struct {
	key      [32]byte  // of the last reading acted on (zero: seeded)
	pods     []*v1.Pod // last accepted
	err      error
	errSince time.Time
	// objects are the last accepted; objErrs the refused documents of
	// the last reading, seen first at objErrSince.
	objects     []*objects.Object
	objErrs     []ObjectError
	objErrSince time.Time
	// held is a reading that would stop pods, waiting for Confirm.
	held      *reading
	heldSince time.Time
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
	if d.Confirm == 0 {
		d.Confirm = DefaultConfirm
	}
	if d.due == nil {
		d.due = map[string]time.Time{}
		d.noted = map[string]string{}
		d.unlinked = map[string]bool{}
	}
}

// Load reads the whole directory once and returns the resulting state.
// Files whose reading awaits confirmation keep their pods for now; Run
// reads them again.
func (d *Dir) Load() (State, error) {
	d.init()
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		return State{}, fmt.Errorf("manifest directory %s: %w", d.Path, err)
	}
	// Every file's read judges its whole path; this says it once for
	// the directory, before anyone writes a file there.
	switch err := dirTrust(d.Path, os.Geteuid()); {
	case err == nil:
		d.note(d.Path, "")
	case d.AllowUntrusted:
		d.note(d.Path, "manifests are read although "+err.Error()+" (security.allowUntrustedManifests)")
	default:
		d.note(d.Path, "every manifest is refused: "+err.Error())
	}
	now := d.Now()
	seen := map[string]bool{}
	for _, e := range entries {
		if e.IsDir() || Ignored(e.Name()) {
			continue
		}
		seen[e.Name()] = true
		d.refresh(e.Name(), now)
	}
	for name := range d.files {
		if !seen[name] {
			d.refresh(name, now) // removed, or seeded for a file now gone
		}
	}
	return d.state(), nil
}

// refresh reads one file and reports whether what it asks for changed.
func (d *Dir) refresh(name string, now time.Time) bool {
	path := filepath.Join(d.Path, name)
	r := readFile(d.Path, name, d.AllowUntrusted)
	f := d.files[name]
	switch {
	case r.gone:
		delete(d.noted, path)
	case r.skip:
		d.note(path, "manifest file skipped, never opened: "+r.err.Error())
		if f == nil {
			return false
		}
	case r.untrusted != nil:
		d.note(path, "manifest read although "+r.untrusted.Error()+" (security.allowUntrustedManifests)")
	default:
		d.note(path, "")
	}
	d.noteExposed(path, r)
	if f == nil && r.gone {
		return false
	}
	if f != nil && !r.gone && !r.skip && r.key == f.key {
		f.held = nil // unchanged, or back to what was acted on
		delete(d.due, name)
		return false
	}
	deliberate := r.gone && d.unlinked[name]
	delete(d.unlinked, name)
	if f != nil && !deliberate && (stopsPods(f.pods, r) || dropsObjects(f.objects, r)) {
		if f.held == nil || !sameReading(*f.held, r) {
			f.held, f.heldSince = &r, now
			d.due[name] = now.Add(d.Confirm)
			d.Log.Debug("manifest read would stop pods; reading it again before acting", "file", path, "wait", d.Confirm)
			return false
		}
		if at := f.heldSince.Add(d.Confirm); now.Before(at) {
			d.due[name] = at
			return false
		}
	}
	delete(d.due, name)
	if r.gone {
		delete(d.files, name)
		d.Log.Info("manifest removed", "file", path)
		return true
	}
	if f == nil {
		f = &fileEntry{}
		d.files[name] = f
	}
	f.held = nil
	err := r.err
	empty := err == nil && len(r.pods) == 0 && len(r.objs) == 0 && len(r.objErrs) == 0
	if empty && (len(f.pods) > 0 || len(f.objects) > 0) {
		err = errEmpty
	}
	if !r.skip {
		f.key = r.key
	}
	if err != errEmpty {
		d.takeObjects(f, r, path, now)
	} else {
		f.objErrs = nil
	}
	if err == nil {
		for _, p := range r.pods {
			Stamp(p, SourceFile, path)
		}
		f.pods, f.err = r.pods, nil
		d.Log.Info("manifest accepted", "file", path, "pods", len(r.pods), "objects", len(f.objects))
		return true
	}
	if f.err == nil || f.err.Error() != err.Error() {
		f.errSince = now
		d.Log.Error("manifest rejected", "file", path, "err", err)
	}
	f.err = err
	return true
}

// stopsPods reports whether acting on r would stop any of pods, or mark
// them invalid: either waits for Confirm.
func stopsPods(pods []*v1.Pod, r reading) bool {
	if len(pods) == 0 {
		return false
	}
	if r.gone || r.err != nil {
		return true
	}
	kept := map[string]bool{}
	for _, p := range r.pods {
		kept[p.Namespace+"/"+p.Name] = true
	}
	for _, p := range pods {
		if !kept[p.Namespace+"/"+p.Name] {
			return true
		}
	}
	return false
}

func sameReading(a, b reading) bool {
	return a.gone == b.gone && a.skip == b.skip && a.key == b.key
}

// note logs a warning about path once per distinct message ("" clears it).
func (d *Dir) note(path, msg string) {
	if d.noted[path] == msg {
		return
	}
	d.noted[path] = msg
	if msg != "" {
		d.Log.Warn(msg, "file", path)
	}
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
	objs := objectSet{owner: map[objects.Ref]string{}, maxCount: d.MaxObjects, maxBytes: d.MaxObjectBytes}
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
		objErrs := objs.add(n, f)
		if len(objErrs) > 0 {
			if err == nil {
				since = f.objErrSince
			}
			err = joinErrors(err, objErrs)
		}
		if err != nil {
			st.Invalid = append(st.Invalid, Invalid{File: filepath.Join(d.Path, n), Err: err, Since: since})
		}
	}
	st.Objects = objs.list
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
	settle := time.NewTimer(time.Hour)
	d.arm(settle)
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
	relist := func() {
		st, err := d.Load()
		if err != nil {
			d.Log.Error("manifest resync", "err", err)
			return
		}
		d.arm(settle)
		send(st)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return errors.New("manifest watcher closed")
			}
			if filepath.Clean(ev.Name) == filepath.Clean(d.Path) {
				// The directory itself changed (chmod, chown): its
				// files are judged again at once, not at the resync.
				relist()
				continue
			}
			name := filepath.Base(ev.Name)
			if filepath.Dir(ev.Name) != filepath.Clean(d.Path) || Ignored(name) {
				continue
			}
			// Every change, deletions included, is read once the file has
			// been quiet for Settle: a rename away followed by a new file
			// (an editor saving) is then one change, not two.
			d.due[name] = d.Now().Add(d.Settle)
			d.unlinked[name] = ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Create)
			d.arm(settle)
		case <-settle.C:
			now := d.Now()
			changed := false
			for name, at := range d.due {
				if !at.After(now) {
					delete(d.due, name)
					changed = d.refresh(name, now) || changed
				}
			}
			d.arm(settle)
			if changed {
				send(d.state())
			}
		case err := <-w.Errors:
			d.Log.Warn("manifest watch error; the resync will catch up", "dir", d.Path, "err", err)
		case <-resync.C:
			relist()
		}
	}
}

// arm sets t to fire when the next file is due (or not at all).
func (d *Dir) arm(t *time.Timer) {
	if !t.Stop() {
		select {
		case <-t.C:
		default:
		}
	}
	var next time.Time
	for _, at := range d.due {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if !next.IsZero() {
		t.Reset(max(next.Sub(d.Now()), 0))
	}
}

func sameState(a, b State) bool {
	if len(a.Pods) != len(b.Pods) || len(a.Invalid) != len(b.Invalid) || len(a.Objects) != len(b.Objects) {
		return false
	}
	for i := range a.Objects {
		if a.Objects[i].Ref != b.Objects[i].Ref || a.Objects[i].ResourceVersion != b.Objects[i].ResourceVersion {
			return false
		}
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
