package shim

import "io"

// LogWriter writes a container's output to its CRI-format log with the
// rotation the shim uses. The containerd plugin writes the logs of
// containerd's containers with it, from their stdout and stderr FIFOs.
type LogWriter struct{ w *logWriter }

// OpenLog opens (creating what is missing, never through a symbolic
// link) a container's log for appending.
func OpenLog(path string, maxBytes int64, maxFiles int) (*LogWriter, error) {
	w, err := openLog(path, maxBytes, maxFiles)
	if err != nil {
		return nil, err
	}
	return &LogWriter{w}, nil
}

// Copy writes stream ("stdout" or "stderr") line by line until r ends.
// Both streams may be copied at once.
func (l *LogWriter) Copy(stream string, r io.Reader) { l.w.copyStream(stream, r) }

// Close closes the log.
func (l *LogWriter) Close() { l.w.close() }
