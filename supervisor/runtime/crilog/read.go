// Package crilog reads the logs of container instances, which every
// runtime writes in the CRI format the kubelet's runtimes write
// ("<time> <stream> <F|P> <text>", rotated into path.1, path.2, …): their
// text for podvisor logs, and the tails termination messages fall back to.
package crilog

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// MaxLine is the longest log line the writers (the process shim's log
// writer) write as one record; longer ones are split into partial records.
const MaxLine = 16 << 10

// Files returns a log's files oldest first: rotated ones, then current.
func Files(path string) []string {
	var files []string
	for i := 64; i >= 1; i-- {
		p := fmt.Sprintf("%s.%d", path, i)
		if _, err := os.Lstat(p); err == nil {
			files = append(files, p)
		}
	}
	return append(files, path)
}

// Copy writes the text of a CRI log (all its rotated files) to out.
func Copy(out io.Writer, path string) error { return copyFrom(out, Files(path), position{}, nil) }

// copyFrom writes the text of files from start on to out.
func copyFrom(out io.Writer, files []string, start position, f *filter) error {
	for i := start.file; i < len(files); i++ {
		fh, err := openLog(files[i])
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotLog) {
			continue // gone, or something planted that is not a log
		}
		if err != nil {
			return err
		}
		if i == start.file && start.offset > 0 {
			_, err = fh.Seek(start.offset, io.SeekStart)
		}
		if err == nil {
			_, err = copyRecords(out, fh, f)
		}
		fh.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// openLog opens a log file for reading, never through a symbolic link or
// into a FIFO: a link planted in a log directory must not make the daemon
// serve another file.
func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if errors.Is(err, unix.ELOOP) {
		return nil, fmt.Errorf("log %s: %w", path, errNotLog)
	}
	if err != nil {
		return nil, err
	}
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("log %s: %w", path, errNotLog)
	}
	return f, nil
}

var errNotLog = errors.New("not a regular file")

// copyRecords converts CRI records from r to plain text until EOF and
// returns the bytes consumed; a trailing incomplete record is left unread.
// A filter (nil: none) drops records and stamps lines.
func copyRecords(out io.Writer, r io.Reader, f *filter) (int64, error) {
	br := bufio.NewReaderSize(r, MaxLine+128)
	var consumed int64
	for {
		line, err := br.ReadBytes('\n')
		if err != nil {
			if errors.Is(err, io.EOF) {
				return consumed, nil
			}
			return consumed, err
		}
		consumed += int64(len(line))
		if f != nil {
			if err := f.record(out, line); err != nil {
				return consumed, err
			}
			continue
		}
		text, full := parseRecord(line)
		if full {
			text = append(text, '\n')
		}
		if _, err := out.Write(text); err != nil {
			return consumed, err
		}
	}
}

// parseRecord returns the text of one CRI log line and whether it ends a
// logical line (F) rather than continuing (P).
func parseRecord(line []byte) ([]byte, bool) {
	line = bytes.TrimSuffix(line, []byte{'\n'})
	parts := bytes.SplitN(line, []byte{' '}, 4)
	if len(parts) < 4 {
		return line, true
	}
	return parts[3], string(parts[2]) != "P"
}

// Follow writes the log's text so far and then what is appended, across
// rotations, until ctx ends or done closes and everything written is read.
// It waits on inotify, not a timer.
func Follow(ctx context.Context, out io.Writer, path string, done <-chan struct{}) error {
	return follow(ctx, out, path, done, position{}, nil)
}

// follow is Follow from start (in the files Files lists), through filter f.
func follow(ctx context.Context, out io.Writer, path string, done <-chan struct{}, start position, f *filter) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return err
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(path)); err != nil {
		return err
	}
	files := Files(path)
	last := len(files) - 1
	if start.file < last {
		copyFrom(out, files[:last], start, f)
	}
	var cur *os.File
	var offset int64
	if start.file == last {
		offset = start.offset
	}
	defer func() {
		if cur != nil {
			cur.Close()
		}
	}()
	drain := func() error {
		if cur == nil {
			fh, err := openLog(path)
			if err != nil {
				return nil // not created yet
			}
			cur = fh
		}
		if _, err := cur.Seek(offset, io.SeekStart); err != nil {
			return err
		}
		n, err := copyRecords(out, cur, f)
		offset += n
		if fl, ok := out.(interface{ Flush() }); ok {
			fl.Flush()
		}
		return err
	}
	finished := false
	for {
		if err := drain(); err != nil {
			return err
		}
		if finished {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-done:
			finished, done = true, nil
		case ev := <-w.Events:
			if ev.Name != path {
				continue
			}
			if ev.Has(fsnotify.Create) || ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove) {
				// Rotated: finish the old file, then start on the new one.
				if err := drain(); err != nil {
					return err
				}
				if cur != nil {
					cur.Close()
					cur = nil
				}
				offset = 0
			}
		case err := <-w.Errors:
			return err
		}
	}
}
