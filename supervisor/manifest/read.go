package manifest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// reading is what one read of a manifest file found.
type reading struct {
	gone bool // no such file (or a dangling link)
	// skip: not a regular file (FIFO, device, socket, directory), never
	// opened.
	skip bool
	key  [32]byte    // identifies the content (or the error) read
	info fs.FileInfo // of the file read (through a link), when opened
	pods []*v1.Pod
	err  error
}

// errEmpty is the verdict on a file that had pods and stayed empty: an
// empty file is what a rewrite in place looks like half-way, so its pods
// keep running until the file is removed or written again.
var errEmpty = errors.New("the file is empty; its pods keep running until the file is removed or holds them again")

// readFile reads one manifest safely: a FIFO, device or socket (or a link
// to one) is never opened, since opening a FIFO blocks and opening a
// device can act on it; the size is checked before reading and the read
// is bounded, in case the file grows meanwhile. A symbolic link to a
// regular file is followed, as in Kubernetes' static pod directories.
func readFile(path string) reading {
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return reading{gone: true}
	}
	if err != nil {
		return failed(err)
	}
	if !st.Mode().IsRegular() {
		return reading{skip: true, err: fmt.Errorf("not a regular file (%s)", st.Mode().Type())}
	}
	if st.Size() > MaxFileSize {
		return failed(tooLarge(st.Size()))
	}
	// O_NONBLOCK: should the file turn into a FIFO between the stat and
	// the open, the open does not block; fstat then sees what it is.
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return reading{gone: true}
	}
	if err != nil {
		return failed(err)
	}
	defer f.Close()
	if st, err = f.Stat(); err != nil {
		return failed(err)
	}
	if !st.Mode().IsRegular() {
		return reading{skip: true, err: fmt.Errorf("not a regular file (%s)", st.Mode().Type())}
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
	r := reading{key: sha256.Sum256(data), info: st}
	r.pods, r.err = Decode(data)
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

// untrustedFile is the warning for a manifest file untrusted(st) judges,
// or "".
func untrustedFile(st fs.FileInfo, euid int) string {
	if why := untrusted(st, euid); why != "" {
		return "manifest file " + why + ": whoever can write it can run pods as root"
	}
	return ""
}

// untrusted says why a manifest (or the directory) could be changed by
// someone other than root and the daemon's own user, or "". Whoever can
// write a manifest can run pods, as root. st follows links: a link to a
// file someone else owns is judged by that file.
func untrusted(st fs.FileInfo, euid int) string {
	sys, ok := st.Sys().(*syscall.Stat_t)
	if ok && sys.Uid != 0 && int(sys.Uid) != euid {
		return fmt.Sprintf("is owned by uid %d, not root", sys.Uid)
	}
	if st.Mode().Perm()&0o022 != 0 {
		return fmt.Sprintf("is writable by group or others (mode %s)", st.Mode().Perm())
	}
	return ""
}
