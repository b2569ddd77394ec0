package manifest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// maxLinks is how many links one path may pass through, the kernel's
// MAXSYMLINKS.
const maxLinks = 40

// notRegular is the error for a manifest that is no regular file: it is
// skipped, never opened.
type notRegular fs.FileMode

func (m notRegular) Error() string {
	return fmt.Sprintf("not a regular file (%s)", fs.FileMode(m).Type())
}

// openManifest opens name in the directory dir for reading, resolving the
// path from / one component at a time through O_PATH descriptors and
// following links itself, so that what it reports is what it went
// through: every directory (the manifest directory marked Listed), every
// link, and last the file, fstat'ed on the descriptor it returns. Nothing
// is judged here (judgeTrust does); nothing but a regular file is opened
// (notRegular), and that with O_NOFOLLOW and O_NONBLOCK from the
// descriptor of the directory that holds it, so a link or FIFO swapped in
// after the walk is not followed or waited on.
func openManifest(dir, name string) (*os.File, []pathStep, error) {
	w, err := walkDir(dir)
	if err != nil {
		return nil, nil, err
	}
	defer w.close()
	leaf, st, err := w.walk([]string{name})
	if err != nil {
		return nil, w.steps, err
	}
	if leaf == "" {
		return nil, w.steps, notRegular(fs.ModeDir)
	}
	if step := stepOf("", st); !step.Mode.IsRegular() {
		return nil, w.steps, notRegular(step.Mode)
	}
	path := filepath.Join(w.path, leaf)
	fd, err := unix.Openat(w.cur, leaf, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, w.steps, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil {
		f.Close()
		return nil, w.steps, &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	step := stepOf(path, &fst)
	w.steps = append(w.steps, step)
	if !step.Mode.IsRegular() {
		f.Close()
		return nil, w.steps, notRegular(step.Mode)
	}
	return f, w.steps, nil
}

// walkDir resolves the manifest directory dir from /, leaving the walker
// in it.
func walkDir(dir string) (*walker, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: "/", Err: err}
	}
	w := &walker{root: root, cur: -1, path: "/"}
	if err := w.enter(root, "/"); err != nil {
		w.close()
		return nil, err
	}
	leaf, _, err := w.walk(strings.Split(abs, "/"))
	if err == nil && leaf != "" {
		err = &fs.PathError{Op: "open", Path: dir, Err: unix.ENOTDIR}
	}
	if err != nil {
		w.close()
		return nil, err
	}
	w.steps[len(w.steps)-1].Listed = true
	return w, nil
}

// dirTrust is judgeTrust of the manifest directory dir and its path.
func dirTrust(dir string, euid int) error {
	w, err := walkDir(dir)
	if err != nil {
		return nil // Load says why it cannot list it
	}
	defer w.close()
	return judgeTrust(w.steps, euid)
}

// walker resolves a path as the kernel does, one component at a time from
// an O_PATH descriptor, recording each step.
type walker struct {
	root  int    // "/", where absolute link targets start
	cur   int    // the directory reached
	path  string // cur's path, for messages
	steps []pathStep
	links int
}

func (w *walker) close() {
	if w.cur >= 0 && w.cur != w.root {
		unix.Close(w.cur)
	}
	unix.Close(w.root)
}

// enter makes the directory fd, at path, the current one, recording it.
func (w *walker) enter(fd int, path string) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return &fs.PathError{Op: "fstat", Path: path, Err: err}
	}
	w.steps = append(w.steps, stepOf(path, &st))
	if w.cur >= 0 && w.cur != w.root {
		unix.Close(w.cur)
	}
	w.cur, w.path = fd, path
	return nil
}

// walk follows comps from the current directory. It stops at the last
// component when that is neither a directory nor a link, returning its
// name and stat with the current directory the one that holds it; leaf is
// "" when the components lead to a directory, then the current one.
func (w *walker) walk(comps []string) (leaf string, st *unix.Stat_t, err error) {
	for len(comps) > 0 {
		c := comps[0]
		comps = comps[1:]
		if c == "" || c == "." {
			continue
		}
		path := filepath.Join(w.path, c)
		fd, err := unix.Openat(w.cur, c, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", nil, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		var lst unix.Stat_t
		if err := unix.Fstat(fd, &lst); err != nil {
			unix.Close(fd)
			return "", nil, &fs.PathError{Op: "fstat", Path: path, Err: err}
		}
		switch lst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := w.enter(fd, path); err != nil {
				unix.Close(fd)
				return "", nil, err
			}
		case unix.S_IFLNK:
			w.steps = append(w.steps, stepOf(path, &lst))
			target, err := readLink(fd)
			unix.Close(fd)
			if err != nil {
				return "", nil, &fs.PathError{Op: "readlink", Path: path, Err: err}
			}
			if w.links++; w.links > maxLinks {
				return "", nil, &fs.PathError{Op: "open", Path: path, Err: unix.ELOOP}
			}
			if strings.HasPrefix(target, "/") {
				if err := w.enter(w.root, "/"); err != nil {
					return "", nil, err
				}
			}
			comps = append(strings.Split(target, "/"), comps...)
		default:
			unix.Close(fd)
			if hasName(comps) {
				return "", nil, &fs.PathError{Op: "open", Path: path, Err: unix.ENOTDIR}
			}
			return c, &lst, nil
		}
	}
	return "", nil, nil
}

// hasName reports whether comps name anything beyond "." and "".
func hasName(comps []string) bool {
	for _, c := range comps {
		if c != "" && c != "." {
			return true
		}
	}
	return false
}

// readLink reads the target of the link open (O_PATH) as fd.
func readLink(fd int) (string, error) {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return "", err
	}
	if n == len(buf) {
		return "", unix.ENAMETOOLONG
	}
	return string(buf[:n]), nil
}

// stepOf is the pathStep of what st describes.
func stepOf(path string, st *unix.Stat_t) pathStep {
	m := fs.FileMode(st.Mode & 0o777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	if st.Mode&unix.S_ISVTX != 0 {
		m |= fs.ModeSticky
	}
	return pathStep{Path: path, UID: st.Uid, Mode: m}
}
