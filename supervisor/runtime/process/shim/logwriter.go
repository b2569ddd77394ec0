package shim

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// logWriter writes container output in the CRI log format
// ("<RFC3339Nano> <stream> <F|P> <text>") and rotates by size. It is used
// by the shim, the only writer of a container's log, so rotation loses no
// line.
type logWriter struct {
	mu       sync.Mutex
	path     string
	dir      *os.File // the container's log directory, opened without following links
	maxBytes int64
	maxFiles int
	f        *os.File
	size     int64
	now      func() time.Time
	rec      []byte // the record being written
}

// logDirDepth is how many directories above a log file podvisor made
// (<pod>/<container>/N.log) and so walks without following symbolic links.
const logDirDepth = 2

func openLog(path string, maxBytes int64, maxFiles int) (*logWriter, error) {
	dir, err := openLogDir(filepath.Dir(path), logDirDepth)
	if err != nil {
		return nil, err
	}
	f, err := openLogFile(dir, filepath.Base(path), false)
	if err != nil {
		dir.Close()
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		dir.Close()
		return nil, err
	}
	return &logWriter{path: path, dir: dir, maxBytes: maxBytes, maxFiles: maxFiles, f: f, size: st.Size(), now: time.Now}, nil
}

// openLogDir opens dir, creating what is missing. Its last depth
// components are walked with O_NOFOLLOW: a symbolic link planted there
// (say by a process with access to the log directory) is replaced by a
// real directory instead of leading the log somewhere else.
func openLogDir(dir string, depth int) (*os.File, error) {
	parts := []string{}
	top := filepath.Clean(dir)
	for i := 0; i < depth && filepath.Dir(top) != top; i++ {
		parts = append([]string{filepath.Base(top)}, parts...)
		top = filepath.Dir(top)
	}
	if err := os.MkdirAll(top, 0o750); err != nil {
		return nil, err
	}
	fd, err := unix.Open(top, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: top, Err: err}
	}
	for _, name := range parts {
		next, err := openSubdir(fd, name)
		unix.Close(fd)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: filepath.Join(top, name), Err: err}
		}
		fd, top = next, filepath.Join(top, name)
	}
	return os.NewFile(uintptr(fd), top), nil
}

func openSubdir(parent int, name string) (int, error) {
	const flags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	fd, err := unix.Openat(parent, name, flags, 0)
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENOTDIR) {
		// Not a directory of ours: set it aside by removing the entry
		// (never what a link points to).
		fmt.Fprintf(os.Stderr, "log directory entry %s is not a directory; replacing it\n", name)
		if err := unix.Unlinkat(parent, name, 0); err != nil {
			return -1, err
		}
		err = unix.ENOENT
	}
	if errors.Is(err, unix.ENOENT) {
		if err := unix.Mkdirat(parent, name, 0o750); err != nil && !errors.Is(err, unix.EEXIST) {
			return -1, err
		}
		fd, err = unix.Openat(parent, name, flags, 0)
	}
	return fd, err
}

// openLogFile opens (truncate: empties) a log file in dir for appending,
// never through a symbolic link, into a FIFO or device, or into a file
// with other hard links: such an entry is removed and a new file made.
func openLogFile(dir *os.File, name string, truncate bool) (*os.File, error) {
	flags := unix.O_WRONLY | unix.O_APPEND | unix.O_CREAT | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	if truncate {
		flags |= unix.O_TRUNC
	}
	path := filepath.Join(dir.Name(), name)
	for attempt := 0; ; attempt++ {
		fd, err := unix.Openat(int(dir.Fd()), name, flags, 0o640)
		if err == nil {
			var st unix.Stat_t
			if err = unix.Fstat(fd, &st); err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG && st.Nlink <= 1 {
				return os.NewFile(uintptr(fd), path), nil
			}
			unix.Close(fd)
			if err == nil {
				err = unix.EEXIST // not a plain file of its own
			}
		}
		if attempt > 0 || !(errors.Is(err, unix.ELOOP) || errors.Is(err, unix.ENXIO) || errors.Is(err, unix.EEXIST)) {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		fmt.Fprintf(os.Stderr, "log file %s is a link or not a plain file; replacing it\n", path)
		if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil {
			return nil, &os.PathError{Op: "unlink", Path: path, Err: err}
		}
		flags |= unix.O_EXCL
	}
}

// copyStream copies one output stream line by line until EOF. Lines of
// MaxLine bytes or more are split into partial records. It reads through
// a small buffer and keeps a longer line only while it lasts: a keeper
// copies two streams per container, and most lines are short.
func (w *logWriter) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, 512)
	var long []byte // the start of a line longer than br's buffer
	for {
		frag, err := br.ReadSlice('\n')
		line := frag
		if len(long) > 0 || errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, frag...)
			line = long
		}
		for len(line) >= MaxLine && line[MaxLine-1] != '\n' {
			w.write(stream, "P", line[:MaxLine])
			line = line[MaxLine:]
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			continue
		}
		if len(line) > 0 {
			tag := "P"
			if line[len(line)-1] == '\n' {
				tag, line = "F", line[:len(line)-1]
			}
			w.write(stream, tag, line)
		}
		if cap(long) > 4<<10 {
			long = nil // a long line's memory goes back to the heap
		}
		long = long[:0]
		if err != nil {
			return
		}
	}
}

func (w *logWriter) write(stream, tag string, text []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// One record buffer per log, reused: a keeper writes for every
	// container, and garbage would grow its heap.
	b := w.now().UTC().AppendFormat(w.rec[:0], time.RFC3339Nano)
	b = append(b, ' ')
	b = append(b, stream...)
	b = append(b, ' ')
	b = append(b, tag...)
	b = append(b, ' ')
	b = append(b, text...)
	b = append(b, '\n')
	if cap(b) <= 1<<10 {
		w.rec = b
	}
	n, _ := w.f.Write(b)
	w.size += int64(n)
	if w.maxBytes > 0 && w.size >= w.maxBytes {
		w.rotate()
	}
}

// rotate shifts log → log.1 → log.2 … keeping maxFiles files in all,
// renaming within the directory opened at the start.
func (w *logWriter) rotate() {
	w.f.Close()
	dirfd, base := int(w.dir.Fd()), filepath.Base(w.path)
	for i := w.maxFiles - 1; i >= 1; i-- {
		from := base
		if i > 1 {
			from = fmt.Sprintf("%s.%d", base, i-1)
		}
		unix.Renameat(dirfd, from, dirfd, fmt.Sprintf("%s.%d", base, i))
	}
	if w.maxFiles <= 1 {
		unix.Unlinkat(dirfd, base, 0)
	}
	f, err := openLogFile(w.dir, base, true)
	if err != nil {
		f, _ = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	w.f, w.size = f, 0
}

func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.Close()
	w.dir.Close()
}
