package crilog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// The kubelet's bounds on a termination message
// (pkg/kubelet/container: MaxContainerTerminationMessage*).
const (
	// MaxTerminationMessage is how much of the end of a message file is
	// kept.
	MaxTerminationMessage = 4 << 10
	// MaxTerminationLogLines and MaxTerminationLogBytes bound the log
	// tail used by FallbackToLogsOnError.
	MaxTerminationLogLines = 80
	MaxTerminationLogBytes = 2 << 10
)

// TerminationMessage is a finished container's message as the kubelet
// computes it (kuberuntime_container.go, getTerminationMessage and
// convertToKubeContainerStatus): the last 4096 bytes of the message file;
// under FallbackToLogsOnError, when the container failed (exit code not 0,
// and it ran) and the file is missing or empty, the last 80 lines of its
// log, at most their last 2048 bytes. file is the host file bound at the
// container's terminationMessagePath ("" when there is none); runtime is
// the runtime's own message, which the kubelet puts first.
func TerminationMessage(policy v1.TerminationMessagePolicy, file, logPath string, exitCode int32, reason, runtime string) string {
	fallback := policy == v1.TerminationMessageFallbackToLogsOnError && exitCode != 0 && reason != "ContainerCannotRun" && reason != "StartError"
	msg, checkLogs := "", fallback
	if file != "" {
		data, err := readTail(file, MaxTerminationMessage)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			msg, checkLogs = fmt.Sprintf("Error on reading termination log %s: %v", file, err), false
		default:
			msg, checkLogs = string(data), fallback && len(data) == 0
		}
	}
	if checkLogs {
		msg = LogTail(logPath, MaxTerminationLogLines, MaxTerminationLogBytes)
	}
	switch {
	case msg == "":
		return runtime
	case runtime == "":
		return msg
	}
	return runtime + ": " + msg
}

// LogTail is the text of the last lines records of a CRI log file (the
// current one, as the kubelet reads it), at most its last maxBytes.
func LogTail(path string, lines, maxBytes int) string {
	f, err := openLog(path)
	if errors.Is(err, fs.ErrNotExist) {
		return ""
	}
	if err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	defer f.Close()
	start, err := tailStart(f, lines)
	if err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	if _, err := f.Seek(start, io.SeekStart); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	var text bytes.Buffer
	if _, err := copyRecords(&text, f, nil); err != nil {
		return fmt.Sprintf("Error on reading termination message from logs: %v", err)
	}
	b := text.Bytes()
	return string(b[max(0, len(b)-maxBytes):])
}

// tailStart is where the last n lines of f start, as the kubelet's
// tail.FindTailLineStartIndex finds it: just after the (n+1)-th newline
// from the end (an incomplete last line is not counted).
func tailStart(f *os.File, n int) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	const block = 4 << 10
	buf := make([]byte, block)
	pos, seen := st.Size(), 0
	for pos > 0 {
		size := min(int64(block), pos)
		chunk := buf[:size]
		if _, err := f.ReadAt(chunk, pos-size); err != nil {
			return 0, err
		}
		for i := len(chunk) - 1; i >= 0; i-- {
			if chunk[i] == '\n' {
				if seen++; seen == n+1 {
					return pos - size + int64(i) + 1, nil
				}
			}
		}
		pos -= size
	}
	return 0, nil
}

// readTail reads the last max bytes of a regular file, never through a
// symbolic link, a FIFO or a device: the file is the container's to
// write, and the daemon reads it as root.
func readTail(path string, limit int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	off := max(0, st.Size()-limit)
	data := make([]byte, st.Size()-off)
	n, err := f.ReadAt(data, off)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return data[:n], nil
}
