// Command keeper is a throwaway prototype, not wired into podvisor: one
// process per device that is the parent (and subreaper) of every process
// container, holds each instance's flock, copies each container's output
// to its log and records how it ended in exit.json — the work N
// podvisor-shim processes do today, done by one. It exists to measure
// what such a keeper costs (docs/footprint.md):
//
//	keeper -dir DIR -n 50
//
// starts 50 "sleep" containers under DIR/<i>/ and runs until SIGTERM;
// -sh sets their command.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type exitStatus struct {
	ExitCode   int       `json:"exitCode"`
	Signal     int       `json:"signal,omitempty"`
	FinishedAt time.Time `json:"finishedAt"`
}

type instance struct {
	dir  string
	lock *os.File
}

func main() {
	dir := flag.String("dir", "", "instance directories go under DIR")
	n := flag.Int("n", 50, "containers to start")
	buf := flag.Int("buf", 4096, "log copy buffer per stream")
	script := flag.String("sh", "echo started; exec sleep 100000", "each container's shell command")
	flag.Parse()
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "keeper: subreaper:", err)
		os.Exit(1)
	}
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	// Every fork happens on this one locked thread, which lives as long as
	// the keeper: a child's parent-death signal fires when the thread that
	// forked it exits, so containers die with the keeper, never before.
	started := make(chan map[int]*instance)
	go func() {
		runtime.LockOSThread()
		live := map[int]*instance{}
		for i := 0; i < *n; i++ {
			pid, in, err := start(filepath.Join(*dir, fmt.Sprint(i)), *script, *buf)
			if err != nil {
				fmt.Fprintln(os.Stderr, "keeper:", err)
				os.Exit(1)
			}
			live[pid] = in
		}
		started <- live
		reap(live)
	}()
	<-started
	fmt.Println("ready")
	<-term
}

// start runs one container with its output copied to DIR/log and the
// instance lock held in the keeper.
func start(dir, script string, bufSize int) (int, *instance, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, nil, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return 0, nil, fmt.Errorf("instance %s is locked: %w", dir, err)
	}
	log, err := os.OpenFile(filepath.Join(dir, "log"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return 0, nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		return 0, nil, err
	}
	devnull, _ := os.Open(os.DevNull)
	pid, err := syscall.ForkExec("/bin/sh", []string{"sh", "-c", script}, &syscall.ProcAttr{
		Env:   []string{"PATH=/usr/bin:/bin", "INSTANCE=" + dir},
		Files: []uintptr{devnull.Fd(), outW.Fd(), errW.Fd()},
		Sys:   &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	devnull.Close()
	outW.Close()
	errW.Close()
	if err != nil {
		return 0, nil, err
	}
	for _, r := range []*os.File{outR, errR} {
		go func(r *os.File) {
			io.CopyBuffer(log, r, make([]byte, bufSize))
			r.Close()
		}(r)
	}
	return pid, &instance{dir: dir, lock: lock}, nil
}

// reap waits for every child; a container's end is recorded before its
// lock is released, so "lock free" always means "exit recorded".
func reap(live map[int]*instance) {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, 0, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			time.Sleep(time.Second) // no children yet or any more
			continue
		}
		in, ok := live[pid]
		if !ok {
			continue // an orphaned descendant
		}
		delete(live, pid)
		st := exitStatus{ExitCode: ws.ExitStatus(), FinishedAt: time.Now()}
		if ws.Signaled() {
			st.ExitCode, st.Signal = 128+int(ws.Signal()), int(ws.Signal())
		}
		data, _ := json.Marshal(st)
		os.WriteFile(filepath.Join(in.dir, "exit.json"), data, 0o600)
		in.lock.Close()
	}
}
