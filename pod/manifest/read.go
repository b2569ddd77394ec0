package manifest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/objects"
)

// reading is what one read of a manifest file found.
type reading struct {
	gone bool // no such file (or a dangling link)
	// skip: not a regular file (FIFO, device, socket, directory), never
	// opened.
	skip bool
	key  [32]byte // identifies the content (or the error) read
	pods []*v1.Pod
	err  error
	// objs are the file's valid objects, objErrs its refused object
	// documents; objsRead: the documents could be told apart at all.
	objs     []*objects.Object
	objErrs  []ObjectError
	objsRead bool
	// exposed: the file holds a Secret and users other than its owner
	// may read it (its mode).
	exposed os.FileMode
	// untrusted is why the file would have been refused, had
	// Dir.AllowUntrusted not had it read.
	untrusted error
}

// errEmpty is the verdict on a file that had pods and stayed empty: an
// empty file is what a rewrite in place looks like half-way, so its pods
// keep running until the file is removed or written again.
var errEmpty = errors.New("the file is empty; its pods keep running and its objects stay until the file is removed or holds them again")

// readFile reads the manifest name in dir safely. A file someone other
// than root or the daemon's user could have written (judgeTrust) is
// refused unread, unless allowUntrusted. A FIFO, device or socket (or a
// link to one) is never opened, since opening a FIFO blocks and opening a
// device can act on it; the size is checked before reading and the read
// is bounded, in case the file grows meanwhile. A symbolic link to a
// regular file is followed, as in Kubernetes' static pod directories.
// Everything is judged on the descriptors openManifest went through and
// read from, not on a second look at the path.
func readFile(dir, name string, allowUntrusted bool) reading {
	f, steps, err := openManifest(dir, name)
	var nr notRegular
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return reading{gone: true}
	case errors.As(err, &nr):
		return reading{skip: true, err: err}
	case err != nil:
		return failed(err)
	}
	defer f.Close()
	var r reading
	if err := judgeTrust(steps, os.Geteuid()); err != nil {
		if !allowUntrusted {
			return failed(fmt.Errorf("refused, unread: %w", err))
		}
		r.untrusted = err
	}
	st, err := f.Stat()
	if err != nil {
		return failed(err)
	}
	if st.Size() > MaxFileSize {
		return failed(tooLarge(st.Size()))
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return failed(err)
	}
	if len(data) > MaxFileSize {
		return failed(tooLarge(int64(len(data))))
	}
	r.key = sha256.Sum256(data)
	c, err := DecodeContents(data)
	r.pods, r.err = c.Pods, err
	r.objs, r.objErrs, r.objsRead = c.Objects, c.ObjectErrors, c.ObjectsRead
	for _, o := range c.Objects {
		if o.Kind == objects.Secret && st.Mode().Perm()&0o044 != 0 {
			r.exposed = st.Mode().Perm()
		}
	}
	return r
}

func tooLarge(size int64) error {
	return fmt.Errorf("file is %d bytes, larger than the %d byte limit; not read", size, MaxFileSize)
}

// failed is a reading that found an error before any content; the error
// identifies it.
func failed(err error) reading {
	return reading{key: sha256.Sum256([]byte(err.Error())), err: err}
}
