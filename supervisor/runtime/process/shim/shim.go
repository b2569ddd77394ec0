package shim

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/pod/hostcmd"
)

// forwarded are the signals a shim passes on to its container's leader.
var forwarded = []os.Signal{
	unix.SIGTERM, unix.SIGINT, unix.SIGQUIT, unix.SIGHUP, unix.SIGUSR1,
	unix.SIGUSR2, unix.SIGWINCH, unix.SIGPWR, unix.SIGALRM, unix.SIGCONT,
}

// Run is the body of "podvisor-shim DIR": it runs one container
// instance described by DIR/spec.json, logs its output, reaps it and every
// process it leaves behind, and records how it ended in DIR/exit.json. It
// outlives the daemon, so a restarted daemon can adopt the container and
// still learn its exit code.
func Run(dir string) int {
	// Neither the report pipe nor the lock may leak into the container: a
	// leader holding the lock would look like a live shim.
	unix.CloseOnExec(ReportFD)
	unix.CloseOnExec(LockFD)
	report := os.NewFile(ReportFD, "report")
	lock := os.NewFile(LockFD, "lock")
	defer lock.Close() // the lock lives exactly as long as the shim
	spec, err := ReadSpec(dir)
	if err == nil && len(spec.Argv) == 0 {
		err = errors.New("it has no command")
	}
	if err != nil {
		return shimFail(dir, report, time.Now(), fmt.Errorf("reading spec: %w", err))
	}
	// Orphaned descendants of the container are re-parented to us, so we
	// can find and kill them when the container ends.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return shimFail(dir, report, time.Now(), fmt.Errorf("becoming subreaper: %w", err))
	}
	signals := make(chan os.Signal, 16)
	signal.Notify(signals, append(forwarded, KillSignal)...)
	logs, err := openLog(spec.LogPath, spec.LogMaxBytes, spec.LogMaxFiles)
	if err != nil {
		return shimFail(dir, report, time.Now(), fmt.Errorf("opening log: %w", err))
	}
	defer logs.close()

	s := &shim{dir: dir, spec: spec, logs: logs}
	exitc := make(chan ExitStatus, 1)
	startc := make(chan error, 1)
	go s.run(startc, exitc)
	if err := <-startc; err != nil {
		return shimFail(dir, report, s.started, err)
	}
	json.NewEncoder(report).Encode(StartReport{Pid: s.leader, StartedAt: s.started})
	report.Close()

	for {
		select {
		case sig := <-signals:
			s.signal(sig.(syscall.Signal))
		case st := <-exitc:
			if err := WriteJSONAtomic(filepath.Join(dir, ExitFile), st); err != nil {
				fmt.Fprintf(os.Stderr, "writing exit status: %v\n", err)
				return 1
			}
			return 0
		}
	}
}

// shimFail records a container that never started (reason StartError, exit
// code 128, as container runtimes report it) and tells the daemon why.
func shimFail(dir string, report *os.File, at time.Time, err error) int {
	st := ExitStatus{ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: at, FinishedAt: time.Now()}
	WriteJSONAtomic(filepath.Join(dir, ExitFile), st)
	json.NewEncoder(report).Encode(StartReport{Error: err.Error()})
	report.Close()
	return 0
}

type shim struct {
	dir     string
	spec    Spec
	logs    *logWriter
	mu      sync.Mutex
	leader  int
	reaped  bool // the leader's pid is no longer ours to signal
	started time.Time
	// restoreErr: after the last fork the shim could not take back its
	// own oom_score_adj or cgroups (it is charged as the container).
	restoreErr error
}

// run starts the leader and reaps until no descendant is left. It keeps its
// OS thread locked: the leader's parent-death signal fires when the thread
// that forked it exits, and this thread lives as long as the shim.
func (s *shim) run(startc chan<- error, exitc chan<- ExitStatus) {
	runtime.LockOSThread()
	outR, outW, err := os.Pipe()
	if err != nil {
		startc <- err
		return
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		startc <- err
		return
	}
	s.started = time.Now()
	pid, err := s.fork(outW, errW)
	outW.Close()
	errW.Close()
	if s.restoreErr != nil {
		// Only its own container is charged for it: the shim carries on.
		fmt.Fprintf(os.Stderr, "podvisor-shim: %v\n", s.restoreErr)
	}
	if err != nil {
		startc <- err
		return
	}
	var copying sync.WaitGroup
	copying.Add(2)
	go func() { defer copying.Done(); s.logs.copyStream("stdout", outR) }()
	go func() { defer copying.Done(); s.logs.copyStream("stderr", errR) }()

	s.mu.Lock()
	s.leader = pid
	s.mu.Unlock()
	leaderStart, _ := ProcStartTime(pid)
	shimStart, _ := ProcStartTime(os.Getpid())
	WriteJSONAtomic(filepath.Join(s.dir, StateFile), State{
		ShimPid: os.Getpid(), ShimStart: shimStart, LeaderPid: pid, LeaderStart: leaderStart,
		StartedAt: s.started, BootID: BootID(),
	})
	startc <- nil

	var status unix.WaitStatus
	leaderGone, oomKilled := false, false
	for {
		var ws unix.WaitStatus
		got, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil { // ECHILD: nothing left
			break
		}
		if got == pid {
			s.mu.Lock()
			s.reaped = true
			s.mu.Unlock()
			status, leaderGone = ws, true
			oomKilled = ws.Signaled() && ws.Signal() == unix.SIGKILL && s.oomKilled()
		}
		if leaderGone {
			// The container ends with its leader: nothing it started may
			// outlive it. Each reap may have orphaned more processes to
			// us, so kill again until no child is left.
			killDescendants(pid)
		}
	}
	// Every writer of the pipes is gone; drain what they left, but do not
	// hang on a descendant that escaped with a copy of the pipe.
	drained := make(chan struct{})
	go func() { copying.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
	}
	st := exitStatusOf(status, s.started)
	if oomKilled {
		st.Reason = "OOMKilled"
	}
	exitc <- st
}

// oomKilled reads the container cgroup's OOM-kill count, if the daemon
// asked (spec.cgroup.oomEvents).
func (s *shim) oomKilled() bool {
	file := s.spec.Cgroup.OOMEvents
	if file == "" {
		return false
	}
	data, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cannot tell whether the container was OOM-killed: %v\n", err)
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return strings.TrimSpace(v) != "0"
		}
	}
	return false
}

func (s *shim) fork(stdout, stderr *os.File) (int, error) {
	argv := s.spec.Argv
	var path string // looked up in its mount namespace if it has one
	if len(s.spec.Mounts) == 0 {
		var err error
		if path, err = hostcmd.LookPath(argv[0], s.spec.Env); err != nil {
			return 0, err
		}
	}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return 0, err
	}
	defer devnull.Close()
	env, files := s.spec.Env, []uintptr{devnull.Fd(), stdout.Fd(), stderr.Fd()}
	if s.spec.TerminationLog {
		f, err := s.terminationFile()
		if err != nil {
			return 0, fmt.Errorf("termination message file: %w", err)
		}
		defer f.Close()
		files = append(files, f.Fd())
		if !hasEnv(env, TerminationEnv) {
			env = append(env[:len(env):len(env)], TerminationEnv+"="+TerminationPath)
		}
	}
	attr := &syscall.ProcAttr{
		Dir:   s.spec.Dir,
		Env:   env,
		Files: files,
		Sys: &syscall.SysProcAttr{
			Setpgid:   true,
			Pdeathsig: syscall.SIGKILL,
		},
	}
	if cred := hostcmd.Credential(s.spec.UID, s.spec.GID); cred != nil {
		if !cred.NoSetGroups {
			cred.Groups = s.spec.Groups
		}
		attr.Sys.Credential = cred
	}
	s.restoreErr = nil
	traced := traceForks && !s.spec.Cgroup.Await && (s.spec.OOMScoreAdj != nil || len(s.spec.Cgroup.Procs) > 0)
	if traced {
		runtime.LockOSThread() // ptrace requests come from the thread that forked
		defer runtime.UnlockOSThread()
	}
	undo, err := s.prepare(attr.Sys, traced)
	if err != nil {
		return 0, err
	}
	attr.Sys.Ptrace = traced
	pid, leaveErr, err := s.forkExec(path, attr)
	if traced && leaveErr == nil && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES)) {
		// ptrace refused (Yama, seccomp, an LSM; or the exec itself
		// failed, and fails again): take the container's place around the
		// fork instead.
		if s.restoreErr = undo(); s.restoreErr != nil {
			return 0, err
		}
		if undo, err = s.prepare(attr.Sys, false); err != nil {
			return 0, err
		}
		attr.Sys.Ptrace, traced = false, false
		pid, leaveErr, err = s.forkExec(path, attr)
	}
	// A thread left in the container's mount namespace would fork every
	// later container there: like a place not taken back, it ends the
	// keeper (a new one runs the next start).
	s.restoreErr = errors.Join(undo(), leaveErr)
	if err != nil {
		return 0, err
	}
	if traced {
		if err := s.placeStopped(pid); err != nil {
			return 0, err
		}
	}
	return pid, nil
}

// terminationFile creates the container's termination message file,
// writable by its user alone. The instance directory stays the root's:
// the container reaches the file only through its descriptor, so it
// cannot put a link or another file in its place for the daemon to read.
func (s *shim) terminationFile() (*os.File, error) {
	path := filepath.Join(s.dir, TerminationFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	if s.spec.UID != nil || s.spec.GID != nil {
		uid, gid := -1, -1
		if s.spec.UID != nil {
			uid = int(*s.spec.UID)
		}
		if s.spec.GID != nil {
			gid = int(*s.spec.GID)
		}
		if err := f.Chown(uid, gid); err != nil && os.Geteuid() == 0 {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

func hasEnv(env []string, name string) bool {
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k == name {
			return true
		}
	}
	return false
}

// prepare arranges for the next fork to land in the container's cgroup
// with its oom_score_adj; the returned func undoes what applies to the
// shim itself and reports what it could not undo. traced: the child is
// given its oom_score_adj and cgroup v1 groups while stopped at exec
// (placeStopped), the shim does not take them itself.
func (s *shim) prepare(sys *syscall.SysProcAttr, traced bool) (func() error, error) {
	var undo []func() error
	done := func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}
	if v := s.spec.OOMScoreAdj; v != nil && !traced {
		const file = "/proc/self/oom_score_adj"
		old, err := os.ReadFile(file)
		if err != nil {
			return done, err
		}
		// Lowering a score needs CAP_SYS_RESOURCE; without it the
		// container keeps the inherited score (the daemon warns once).
		if err := os.WriteFile(file, []byte(strconv.Itoa(*v)), 0); err == nil {
			undo = append(undo, func() error {
				if err := os.WriteFile(file, old, 0); err != nil {
					return fmt.Errorf("restoring oom_score_adj %s: %w", strings.TrimSpace(string(old)), err)
				}
				return nil
			})
		} else if !errors.Is(err, os.ErrPermission) {
			return done, fmt.Errorf("oom_score_adj %d: %w", *v, err)
		}
	}
	cg := s.spec.Cgroup
	if cg.Dir != "" {
		dir, err := os.Open(cg.Dir)
		if err != nil {
			s.restoreErr = done()
			return func() error { return nil }, fmt.Errorf("container cgroup: %w", err)
		}
		sys.UseCgroupFD, sys.CgroupFD = true, int(dir.Fd())
		undo = append(undo, func() error { dir.Close(); return nil })
	}
	if cg.Await {
		var b [1]byte
		if n, _ := os.Stdin.Read(b[:]); n != 1 {
			s.restoreErr = done()
			return func() error { return nil }, errors.New("the daemon did not place the container in its cgroup")
		}
		os.Stdin.Close()
	}
	if traced {
		return done, nil
	}
	self := []byte(strconv.Itoa(os.Getpid()))
	for _, procs := range cg.Procs {
		if err := os.WriteFile(procs, self, 0); err != nil {
			s.restoreErr = done()
			return func() error { return nil }, fmt.Errorf("joining cgroup %s: %w", filepath.Dir(procs), err)
		}
	}
	if len(cg.Procs) > 0 || cg.Await {
		undo = append(undo, func() error {
			for _, procs := range cg.Return {
				if err := os.WriteFile(procs, self, 0); err != nil {
					return fmt.Errorf("leaving the container's cgroups for %s: %w", filepath.Dir(procs), err)
				}
			}
			return nil
		})
	}
	return done, nil
}

// signal forwards a signal to the leader, or on KillSignal kills the tree.
func (s *shim) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.leader == 0 || s.reaped {
		return // until reaped the pid cannot be reused: it is our child
	}
	if sig == KillSignal {
		unix.Kill(-s.leader, unix.SIGKILL)
		unix.Kill(s.leader, unix.SIGKILL)
		return
	}
	unix.Kill(s.leader, sig)
}

// killDescendants SIGKILLs the leader's process group and every process
// re-parented to this shim; the caller's wait loop reaps them.
func killDescendants(leader int) {
	unix.Kill(-leader, unix.SIGKILL)
	for _, pid := range children() {
		unix.Kill(pid, unix.SIGKILL)
	}
}

// children lists this process's direct children, across its threads.
func children() []int {
	var out []int
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", os.Getpid()))
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

func exitStatusOf(ws unix.WaitStatus, started time.Time) ExitStatus {
	st := ExitStatus{StartedAt: started, FinishedAt: time.Now()}
	switch {
	case ws.Exited():
		st.ExitCode = int32(ws.ExitStatus())
	case ws.Signaled():
		st.Signal = int32(ws.Signal())
		st.ExitCode = 128 + int32(ws.Signal())
	}
	return st
}
