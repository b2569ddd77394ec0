// Package safepath resolves paths beneath a directory the way the kubelet
// resolves subPath after CVE-2017-1002101 and CVE-2021-25741: component by
// component from an open directory, never following a symbolic link and
// never leaving the directory, holding a file descriptor at every step.
// What a container plants in a volume (a link to "/", a link swapped in
// between a check and a use) therefore cannot make the daemon open,
// create or mount anything outside the volume: the result is a file
// descriptor, and Bind mounts that descriptor, not a path.
//
// Symbolic links are refused, also those that would stay inside: the
// kubelet follows those after a beneath-check, which needs a resolver of
// its own on kernels without openat2; refusing is the simple safe rule.
package safepath

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrSymlink is the error (wrapped in *Error) for a path component that
// is a symbolic link.
var ErrSymlink = errors.New("is a symbolic link, which is not followed")

// ErrEscape is the error (wrapped in *Error) for a ".." component or an
// absolute path: both would leave the directory.
var ErrEscape = errors.New("leaves the directory")

// Error says which component of which path could not be resolved.
type Error struct {
	Path      string // the relative path asked for
	Component string // the path up to and including the failing component
	Err       error
}

func (e *Error) Error() string {
	return fmt.Sprintf("path %q: %q %v", e.Path, e.Component, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// components splits a relative path, refusing what would leave the root.
func components(rel string) ([]string, error) {
	if strings.HasPrefix(rel, "/") {
		return nil, &Error{Path: rel, Component: rel, Err: ErrEscape}
	}
	var out []string
	for _, c := range strings.Split(rel, "/") {
		switch c {
		case "", ".":
		case "..":
			return nil, &Error{Path: rel, Component: strings.Join(append(out, c), "/"), Err: ErrEscape}
		default:
			out = append(out, c)
		}
	}
	return out, nil
}

// OpenTrusted opens a path no container can write to (nor any of its
// parents) as an O_PATH descriptor: the root to resolve beneath, or a
// volume whose whole path is trusted. Links in it are followed.
func OpenTrusted(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// Open opens rel beneath root as an O_PATH descriptor, refusing symbolic
// links and "..". The file's Name is root's name joined with rel, for
// messages only: use the descriptor.
func Open(root *os.File, rel string) (*os.File, error) {
	parts, err := components(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return dup(root)
	}
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	fd, err := unix.Openat2(int(root.Fd()), strings.Join(parts, "/"), &how)
	if err == nil {
		return os.NewFile(uintptr(fd), root.Name()+"/"+strings.Join(parts, "/")), nil
	}
	// Without openat2 (before Linux 5.6, or refused by a seccomp filter)
	// and to name the component that failed: one component at a time.
	return walk(root, rel, parts, nil)
}

// MkdirAll opens the directory rel beneath root, creating what is missing
// with mode (umask aside) through the parents' descriptors, as the
// kubelet's doSafeMakeDir does. A component that exists must be a
// directory, not a link to one.
func MkdirAll(root *os.File, rel string, mode os.FileMode) (*os.File, error) {
	parts, err := components(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return dup(root)
	}
	return walk(root, rel, parts, func(dirfd int, name string) error {
		err := unix.Mkdirat(dirfd, name, uint32(mode.Perm()))
		if err != nil && err != unix.EEXIST {
			return err
		}
		if err == nil {
			// mkdir applied the umask; the kubelet sets the mode it meant.
			return chmodAt(dirfd, name, mode)
		}
		return nil
	})
}

// CreateFile opens the regular file rel beneath root, creating it empty
// with mode if nothing is there (hostPath FileOrCreate). Its parent
// must exist.
func CreateFile(root *os.File, rel string, mode os.FileMode) (*os.File, error) {
	parts, err := components(rel)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return dup(root)
	}
	last := len(parts) - 1
	parent, err := Open(root, strings.Join(parts[:last], "/"))
	if err != nil {
		return nil, err
	}
	defer parent.Close()
	fd, err := unix.Openat(int(parent.Fd()), parts[last], unix.O_CREAT|unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, uint32(mode.Perm()))
	if err != nil {
		if err == unix.ELOOP {
			err = ErrSymlink
		}
		return nil, &Error{Path: rel, Component: rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), root.Name()+"/"+strings.Join(parts, "/"))
	defer f.Close()
	return Open(root, rel)
}

// WriteFile writes data to the file rel beneath root, creating it and
// its missing parent directories (0755), never through a link.
func WriteFile(root *os.File, rel string, data []byte, mode os.FileMode) error {
	parts, err := components(rel)
	if err != nil {
		return err
	}
	if len(parts) == 0 {
		return &Error{Path: rel, Component: rel, Err: unix.EISDIR}
	}
	last := len(parts) - 1
	parent, err := MkdirAll(root, strings.Join(parts[:last], "/"), 0o755)
	if err != nil {
		return err
	}
	defer parent.Close()
	fd, err := unix.Openat(int(parent.Fd()), parts[last], unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, uint32(mode.Perm()))
	if err != nil {
		if err == unix.ELOOP {
			err = ErrSymlink
		}
		return &Error{Path: rel, Component: rel, Err: err}
	}
	f := os.NewFile(uintptr(fd), parent.Name()+"/"+parts[last])
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
		f.Close()
		return &Error{Path: rel, Component: rel, Err: errors.New("is not a regular file")}
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Mode is the permission bits of f's file.
func Mode(f *os.File) (os.FileMode, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, err
	}
	return os.FileMode(st.Mode & 0o777), nil
}

// walk opens parts one at a time with O_NOFOLLOW from root. A missing
// component is handed to create, when given, and opened again.
func walk(root *os.File, rel string, parts []string, create func(dirfd int, name string) error) (*os.File, error) {
	dir, err := dup(root)
	if err != nil {
		return nil, err
	}
	for i, name := range parts {
		fail := func(err error) (*os.File, error) {
			dir.Close()
			return nil, &Error{Path: rel, Component: strings.Join(parts[:i+1], "/"), Err: err}
		}
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == unix.ENOENT && create != nil {
			if err = create(int(dir.Fd()), name); err == nil {
				fd, err = unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			}
		}
		if err != nil {
			return fail(err)
		}
		next := os.NewFile(uintptr(fd), dir.Name()+"/"+name)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			next.Close()
			return fail(err)
		}
		// O_PATH|O_NOFOLLOW opens a link itself rather than failing.
		switch {
		case st.Mode&unix.S_IFMT == unix.S_IFLNK:
			next.Close()
			return fail(ErrSymlink)
		case i < len(parts)-1 && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			next.Close()
			return fail(unix.ENOTDIR)
		case create != nil && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			next.Close()
			return fail(unix.ENOTDIR)
		}
		dir.Close()
		dir = next
	}
	return dir, nil
}

// chmodAt sets the mode of dirfd/name, a directory just made.
func chmodAt(dirfd int, name string, mode os.FileMode) error {
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchmod(fd, uint32(mode.Perm()))
}

func dup(f *os.File) (*os.File, error) {
	fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), f.Name()), nil
}

// ProcPath is the magic link to f's file in /proc, which mount(2), open
// and chmod follow to the very inode f holds, whatever its path now is.
func ProcPath(f *os.File) string {
	return fmt.Sprintf("/proc/self/fd/%d", f.Fd())
}

// IsDir reports whether f is a directory.
func IsDir(f *os.File) (bool, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return false, err
	}
	return st.Mode&unix.S_IFMT == unix.S_IFDIR, nil
}
