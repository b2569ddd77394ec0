package plugin

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	ctrd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/fifo"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// DefaultFIFODir holds the FIFOs containerd's shims write containers'
// output to, one directory per task, as containerd's own cio does, unless
// Config.FIFODir names another. The plugin reads them and writes each
// container's CRI log: no process per container for logs (the binary://
// log driver cost ~0.9 MiB each).
const DefaultFIFODir = "/run/podvisor/fifo"

// Labels that keep where a container's log goes, so that a restarted
// plugin re-opens its FIFOs into the same log.
const (
	labelLogPath     = "io.podvisor.log-path"
	labelLogMaxBytes = "io.podvisor.log-max-bytes"
	labelLogMaxFiles = "io.podvisor.log-max-files"
)

// logDrainTimeout bounds how long an exit waits for the last output to
// reach the log once containerd's shim has closed the container's streams
// (a process that kept a copy of them, in the host's PID namespace, may
// hold them open).
const logDrainTimeout = time.Second

// logSpec is where a container's output goes.
type logSpec struct {
	Path     string
	MaxBytes int64
	MaxFiles int
}

func (l logSpec) labels() map[string]string {
	return map[string]string{labelLogPath: l.Path, labelLogMaxBytes: strconv.FormatInt(l.MaxBytes, 10),
		labelLogMaxFiles: strconv.Itoa(l.MaxFiles)}
}

// logSpecOf reads a container's log labels; ok is false for a container
// made by a plugin that had none.
func logSpecOf(labels map[string]string) (l logSpec, ok bool) {
	l.Path = labels[labelLogPath]
	if l.Path == "" {
		return l, false
	}
	l.MaxBytes, _ = strconv.ParseInt(labels[labelLogMaxBytes], 10, 64)
	l.MaxFiles, _ = strconv.Atoi(labels[labelLogMaxFiles])
	return l, true
}

// fifoLog is a task's output: its stdout and stderr FIFOs, copied into
// the container's log until containerd's shim closes them. It is the
// cio.IO of the task.
type fifoLog struct {
	set    *cio.FIFOSet
	log    *shim.LogWriter
	cancel context.CancelFunc
	pipes  []io.ReadCloser
	done   chan struct{} // closed once both streams ended
	closed sync.Once
}

// openFIFOLog opens set's stdout and stderr FIFOs (creating them) for
// reading and copies them into the log at spec. The opens complete when
// the shim opens the writing ends; reads end when it closes them. On an
// error the FIFOs stay: the caller decides.
func openFIFOLog(set *cio.FIFOSet, spec logSpec) (*fifoLog, error) {
	w, err := shim.OpenLog(spec.Path, spec.MaxBytes, max(spec.MaxFiles, 1))
	if err != nil {
		return nil, fmt.Errorf("container log %s: %w", spec.Path, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &fifoLog{set: set, log: w, cancel: cancel, done: make(chan struct{})}
	streams := map[string]string{"stdout": set.Stdout, "stderr": set.Stderr}
	var wg sync.WaitGroup
	for stream, path := range streams {
		r, err := fifo.OpenFifo(ctx, path, syscall.O_RDONLY|syscall.O_CREAT|syscall.O_NONBLOCK, 0o700)
		if err != nil {
			l.stop()
			return nil, fmt.Errorf("%s FIFO of %s: %w", stream, spec.Path, err)
		}
		l.pipes = append(l.pipes, r)
		wg.Add(1)
		go func() { defer wg.Done(); w.Copy(stream, r) }()
	}
	go func() { wg.Wait(); close(l.done) }()
	return l, nil
}

// Config is the task's IO: no stdin, no terminal.
func (l *fifoLog) Config() cio.Config {
	return cio.Config{Stdout: l.set.Stdout, Stderr: l.set.Stderr}
}

// Cancel stops waiting for a writer that never came (a task that failed
// to start).
func (l *fifoLog) Cancel() { l.cancel() }

// Wait waits for both streams to end, at most logDrainTimeout: the
// client's task.Delete waits here before it has the shim close them.
func (l *fifoLog) Wait() { l.drain() }

// drain waits, bounded, for the output still in the FIFOs to be logged.
func (l *fifoLog) drain() {
	select {
	case <-l.doneOrClosed():
	case <-time.After(logDrainTimeout):
	}
}

// stop stops copying and closes the log; the FIFOs stay.
func (l *fifoLog) stop() {
	l.closed.Do(func() {
		l.cancel()
		for _, p := range l.pipes {
			p.Close()
		}
		<-l.doneOrClosed()
		l.log.Close()
	})
}

// Close stops copying, closes the log and removes the FIFOs. It may be
// called more than once (the client's task.Delete and the plugin).
func (l *fifoLog) Close() error {
	l.stop()
	return l.set.Close()
}

// doneOrClosed is done, or a closed channel if the copies never started.
func (l *fifoLog) doneOrClosed() <-chan struct{} {
	if len(l.pipes) < 2 {
		c := make(chan struct{})
		close(c)
		return c
	}
	return l.done
}

// fifoLogs are the tasks' logs this plugin copies, by container ID, and
// root, the directory of their FIFOs.
type fifoLogs struct {
	root string
	log  *slog.Logger
	mu   sync.Mutex
	byID map[string]*fifoLog
}

// creator makes a new task's FIFOs and copies them into its log.
func (ls *fifoLogs) creator(spec logSpec) cio.Creator {
	return func(id string) (cio.IO, error) {
		set, err := cio.NewFIFOSetInDir(ls.root, id, false)
		if err != nil {
			return nil, err
		}
		set.Stdin = ""
		l, err := openFIFOLog(set, spec)
		if err != nil {
			set.Close()
			return nil, err
		}
		ls.put(id, l)
		return l, nil
	}
}

// attach re-opens a running task's FIFOs, as containerd reports them,
// after a plugin restart; a task whose log this plugin already copies
// (or that has no FIFOs of podvisor's) gets none.
func (ls *fifoLogs) attach(c ctrd.Container, labels map[string]string) cio.Attach {
	spec, ok := logSpecOf(labels)
	return func(found *cio.FIFOSet) (cio.IO, error) {
		ls.mu.Lock()
		_, copying := ls.byID[c.ID()]
		ls.mu.Unlock()
		dir, ours := ls.dirOf(found.Config)
		if !ok || copying || !ours {
			return nil, nil
		}
		set := cio.NewFIFOSet(cio.Config{Stdout: found.Stdout, Stderr: found.Stderr}, func() error { return os.RemoveAll(dir) })
		l, err := openFIFOLog(set, spec)
		if err != nil {
			// Not copied (its writes block once the FIFO is full), but
			// its exit is still followed.
			ls.log.Warn("re-opening a container's output", "id", c.ID(), "err", err)
			return nil, nil
		}
		ls.put(c.ID(), l)
		return l, nil
	}
}

func (ls *fifoLogs) put(id string, l *fifoLog) {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	if ls.byID == nil {
		ls.byID = map[string]*fifoLog{}
	}
	if old := ls.byID[id]; old != nil {
		go old.Close()
	}
	ls.byID[id] = l
}

// wait waits up to d for a container's streams to end (containerd's shim
// closed them) and reports whether they did; true for a container whose
// output this plugin does not copy.
func (ls *fifoLogs) wait(id string, d time.Duration) bool {
	ls.mu.Lock()
	l := ls.byID[id]
	ls.mu.Unlock()
	if l == nil {
		return true
	}
	select {
	case <-l.done:
		return true
	case <-time.After(d):
		return false
	}
}

// finish logs what is left of a container's output (its task deleted, the
// shim has closed the streams) and closes its log.
func (ls *fifoLogs) finish(id string) {
	ls.mu.Lock()
	l := ls.byID[id]
	delete(ls.byID, id)
	ls.mu.Unlock()
	if l != nil {
		l.drain()
		l.Close()
	}
}

// detach stops copying every log without removing the FIFOs, for a
// plugin that stops: the next one re-opens them (attach).
func (ls *fifoLogs) detach() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for id, l := range ls.byID {
		l.stop()
		delete(ls.byID, id)
	}
}

// dirOf is the directory of a task's FIFOs, if the plugin made it.
func (ls *fifoLogs) dirOf(set cio.Config) (string, bool) {
	dir := filepath.Dir(set.Stdout)
	return dir, set.Stdout != "" && filepath.Dir(dir) == filepath.Clean(ls.root)
}

// removeFIFOs is an Attach that removes the FIFOs of a task whose output
// nobody will read (it ended while no plugin was copying it).
func (ls *fifoLogs) removeFIFOs(found *cio.FIFOSet) (cio.IO, error) {
	if dir, ours := ls.dirOf(found.Config); ours {
		os.RemoveAll(dir)
	}
	return nil, nil
}
