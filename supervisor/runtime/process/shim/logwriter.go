package shim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// logWriter writes container output in the CRI log format
// ("<RFC3339Nano> <stream> <F|P> <text>") and rotates by size. It is used
// by the shim, the only writer of a container's log, so rotation loses no
// line.
type logWriter struct {
	mu       sync.Mutex
	path     string
	maxBytes int64
	maxFiles int
	f        *os.File
	size     int64
	now      func() time.Time
}

func openLog(path string, maxBytes int64, maxFiles int) (*logWriter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	return &logWriter{path: path, maxBytes: maxBytes, maxFiles: maxFiles, f: f, size: st.Size(), now: time.Now}, nil
}

// copyStream copies one output stream line by line until EOF.
func (w *logWriter) copyStream(stream string, r io.Reader) {
	br := bufio.NewReaderSize(r, MaxLine)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			tag := "P"
			if line[len(line)-1] == '\n' {
				tag, line = "F", line[:len(line)-1]
			}
			w.write(stream, tag, line)
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			return
		}
	}
}

func (w *logWriter) write(stream, tag string, text []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var b bytes.Buffer
	b.WriteString(w.now().UTC().Format(time.RFC3339Nano))
	b.WriteByte(' ')
	b.WriteString(stream)
	b.WriteByte(' ')
	b.WriteString(tag)
	b.WriteByte(' ')
	b.Write(text)
	b.WriteByte('\n')
	n, _ := w.f.Write(b.Bytes())
	w.size += int64(n)
	if w.maxBytes > 0 && w.size >= w.maxBytes {
		w.rotate()
	}
}

// rotate shifts log → log.1 → log.2 … keeping maxFiles files in all.
func (w *logWriter) rotate() {
	w.f.Close()
	for i := w.maxFiles - 1; i >= 1; i-- {
		from := w.path
		if i > 1 {
			from = fmt.Sprintf("%s.%d", w.path, i-1)
		}
		os.Rename(from, fmt.Sprintf("%s.%d", w.path, i))
	}
	if w.maxFiles <= 1 {
		os.Remove(w.path)
	}
	f, err := os.OpenFile(w.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o640)
	if err != nil {
		f, _ = os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	}
	w.f, w.size = f, 0
}

func (w *logWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.f.Close()
}
