package manifest

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/podvisor/podvisor/pod/objects"
)

// takeObjects makes a reading's objects the file's: an object whose
// document is refused now keeps its last valid version (a typo must not
// take a working configuration away), as a file's pods do. A reading
// whose documents could not be told apart keeps them all.
func (d *Dir) takeObjects(f *fileEntry, r reading, path string, now time.Time) {
	if !r.objsRead {
		f.objErrs = nil
		return
	}
	kept := make([]*objects.Object, 0, len(r.objs))
	have := map[objects.Ref]bool{}
	for _, o := range r.objs {
		have[o.Ref] = true
		if old := findObject(f.objects, o.Ref); old != nil && old.Immutable && !sameContent(old, o) {
			// The API server refuses to change an immutable object;
			// so does the directory, until the daemon restarts.
			r.objErrs = append(r.objErrs, ObjectError{Ref: o.Ref, Err: fmt.Errorf("%s %s/%s in %s refused: field is immutable when `immutable` is set",
				o.Kind, o.Namespace, o.Name, path)})
			o = old
		}
		kept = append(kept, o)
	}
	for _, e := range r.objErrs {
		for _, old := range f.objects {
			if old.Ref == e.Ref && !have[old.Ref] {
				kept = append(kept, old)
				have[old.Ref] = true
			}
		}
	}
	if msg := objectErrorsText(r.objErrs); msg != objectErrorsText(f.objErrs) {
		f.objErrSince = now
		for _, e := range r.objErrs {
			d.Log.Error("manifest object rejected", "file", path, "err", e.Err)
		}
	}
	f.objects, f.objErrs = kept, r.objErrs
}

func findObject(objs []*objects.Object, ref objects.Ref) *objects.Object {
	for _, o := range objs {
		if o.Ref == ref {
			return o
		}
	}
	return nil
}

// sameContent tells whether an object's new version changes what the
// API server keeps of an immutable one: its data, type and immutability.
func sameContent(old, o *objects.Object) bool {
	if old.Immutable != o.Immutable || old.Type != o.Type || len(old.Data) != len(o.Data) {
		return false
	}
	for k, v := range old.Data {
		if w, ok := o.Data[k]; !ok || string(w) != string(v) {
			return false
		}
	}
	return true
}

// noteExposed warns, once while it lasts, that a file holding Secrets
// may be read by users other than its owner: the Secrets are only as
// private as the file.
func (d *Dir) noteExposed(path string, r reading) {
	key, msg := path+" (secrets)", ""
	if r.exposed != 0 {
		msg = fmt.Sprintf("manifest file holds Secrets that others may read (mode %04o); make it 0600", r.exposed)
	}
	if d.noted[key] == msg {
		return
	}
	d.noted[key] = msg
	if msg != "" {
		d.Log.Warn(msg, "file", path)
	}
}

// dropsObjects reports whether acting on r would take away any of objs:
// it waits for Confirm, as a read that would stop pods does.
func dropsObjects(objs []*objects.Object, r reading) bool {
	if len(objs) == 0 {
		return false
	}
	if r.gone {
		return true
	}
	if !r.objsRead {
		return false // they are kept
	}
	have := map[objects.Ref]bool{}
	for _, o := range r.objs {
		have[o.Ref] = true
	}
	for _, e := range r.objErrs {
		have[e.Ref] = true // kept at its last valid version
	}
	for _, o := range objs {
		if !have[o.Ref] {
			return true
		}
	}
	return false
}

// objectSet gathers the directory's objects file by file: an object
// defined in two files is the first file's, and the bounds refuse what
// comes after them.
type objectSet struct {
	owner    map[objects.Ref]string // the file that defines each
	list     []*objects.Object
	bytes    int64
	maxCount int
	maxBytes int64
}

// add takes a file's objects and returns what is wrong with them: its
// refused documents, objects defined before, objects past the bounds.
func (s *objectSet) add(file string, f *fileEntry) []error {
	var errs []error
	for _, e := range f.objErrs {
		errs = append(errs, e.Err)
	}
	for _, o := range f.objects {
		if other, ok := s.owner[o.Ref]; ok {
			errs = append(errs, fmt.Errorf("%s %s/%s is already defined in %s", o.Kind, o.Namespace, o.Name, other))
			continue
		}
		size := int64(o.Size())
		switch {
		case s.maxCount > 0 && len(s.list)+1 > s.maxCount:
			errs = append(errs, fmt.Errorf("%s %s/%s refused: the manifest directory's objects would be more than objects.maxObjects (%d)",
				o.Kind, o.Namespace, o.Name, s.maxCount))
			continue
		case s.maxBytes > 0 && s.bytes+size > s.maxBytes:
			errs = append(errs, fmt.Errorf("%s %s/%s refused: the manifest directory's objects would hold more than objects.maxBytes (%d bytes)",
				o.Kind, o.Namespace, o.Name, s.maxBytes))
			continue
		}
		s.owner[o.Ref] = file
		s.bytes += size
		s.list = append(s.list, o)
	}
	return errs
}

// joinErrors is one error of a file's: its pods' error (if any), then
// its objects', separated by "; ".
func joinErrors(first error, rest []error) error {
	var msgs []string
	if first != nil {
		msgs = append(msgs, first.Error())
	}
	for _, e := range rest {
		msgs = append(msgs, e.Error())
	}
	return errors.New(strings.Join(msgs, "; "))
}

func objectErrorsText(errs []ObjectError) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString(e.Err.Error())
		b.WriteByte('\n')
	}
	return b.String()
}
