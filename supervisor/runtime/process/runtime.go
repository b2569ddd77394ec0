// Package process runs containers as host processes that outlive the
// daemon: under one keeper per data directory ("podvisor-shim --keeper",
// see keeper.go) when they have a cgroup of their own, else each under a
// small shim ("podvisor-shim DIR").
//
// At most once: before starting an instance the daemon creates the
// instance directory, takes an exclusive flock on its lock file, and hands
// the locked descriptor to the keeper (SCM_RIGHTS) or the shim. The lock
// is therefore held from before the start until the instance has ended and
// its exit is recorded, whatever is killed when: "the instance is alive" is
// exactly "the lock is held". A restarted daemon scans the instance
// directories, adopts every instance whose lock is held and reads the
// recorded exit status of every other.
package process

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// Runtime starts, signals and watches container instances through their
// keeper or shim.
type Runtime struct {
	dir     string   // one directory per instance
	shimCmd []string // the shim command; the instance directory is appended
	cgroups runtime.Cgroups
	log     *slog.Logger
	exits   chan runtime.Exit

	keepers  *keepers
	keeperOn bool // start through the keeper (EnableKeeper)

	mu   sync.Mutex
	live map[string]*instance
}

type instance struct {
	id      string
	shimPid int
	child   bool // ours to reap
	pidfd   int  // for signalling; the waiter holds its own copy
	// keeper runs the instance instead of a shim of its own (then shimPid
	// and pidfd are unused); starting: its start is not answered yet.
	keeper   *keeperConn
	starting bool
}

// StartTimeout bounds how long a shim may take to report its container
// started.
const StartTimeout = 10 * time.Second

// New returns a runtime keeping instance directories under dir and running
// shimCmd (podvisor-shim, or "podvisor shim") with the instance directory
// appended for each container, placing containers in cg's cgroups.
func New(dir string, shimCmd []string, cg runtime.Cgroups, log *slog.Logger) (*Runtime, error) {
	if len(shimCmd) == 0 {
		return nil, errors.New("no shim command")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	r := &Runtime{dir: dir, shimCmd: shimCmd, cgroups: cg, log: log, exits: make(chan runtime.Exit, 256), live: map[string]*instance{}}
	r.keepers = newKeepers(r)
	return r, nil
}

// Exits delivers the end of every started or adopted instance.
func (r *Runtime) Exits() <-chan runtime.Exit { return r.exits }

func (r *Runtime) instanceDir(id string) string { return filepath.Join(r.dir, id) }

// TerminationFile is where an instance started with Spec.TerminationLog
// has its termination message.
func (r *Runtime) TerminationFile(id string) string {
	return filepath.Join(r.instanceDir(id), shim.TerminationFile)
}

// StartPlaced runs a container instance and returns when its process
// runs; an error means it never ran (a StartError for the caller to
// record). A non-nil place puts the container into its cgroup given the
// shim's pid (a systemd scope needs a process to exist): the shim waits,
// with spec.Cgroup.Await set, until place has returned.
func (r *Runtime) StartPlaced(spec shim.Spec, place func(shimPid int) error) (time.Time, error) {
	at, err := r.startPlaced(spec, place)
	if err != nil && spec.PrivateFile != "" && !errors.Is(err, fs.ErrExist) {
		os.Remove(spec.PrivateFile) // it never ran, and will not
	}
	return at, err
}

func (r *Runtime) startPlaced(spec shim.Spec, place func(shimPid int) error) (time.Time, error) {
	if (place != nil) != spec.Cgroup.Await {
		return time.Time{}, errors.New("a placed start needs spec.cgroup.await, and only it")
	}
	dir := r.instanceDir(spec.InstanceID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return time.Time{}, fmt.Errorf("instance directory: %w", err) // IDs are never reused
	}
	if err := shim.WriteSpec(dir, spec); err != nil {
		return time.Time{}, err
	}
	lock, err := os.OpenFile(filepath.Join(dir, shim.LockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return time.Time{}, err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return time.Time{}, fmt.Errorf("locking new instance %s: %w", spec.InstanceID, err)
	}
	// The keeper tells a container's processes from another's by their
	// cgroup: without one of its own, a container gets its own shim.
	if r.keeperOn && place == nil && (spec.Cgroup.Dir != "" || len(spec.Cgroup.Procs) > 0) {
		return r.startKept(spec, lock)
	}
	repR, repW, err := os.Pipe()
	if err != nil {
		return time.Time{}, err
	}
	defer repR.Close()
	shimLog, err := os.OpenFile(filepath.Join(dir, shim.LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		repW.Close()
		return time.Time{}, err
	}
	stdin, _ := os.Open(os.DevNull)
	var goW *os.File // written once the shim is placed
	if place != nil {
		stdin.Close()
		if stdin, goW, err = os.Pipe(); err != nil {
			repW.Close()
			shimLog.Close()
			return time.Time{}, err
		}
		defer goW.Close()
	}
	argv := append(append([]string{}, r.shimCmd...), dir)
	proc, err := os.StartProcess(argv[0], argv, &os.ProcAttr{
		Files: []*os.File{stdin, shimLog, shimLog, repW, lock},
		// Its own session: the daemon's terminal and process group
		// signals (Ctrl-C, kill of the daemon's group) do not reach pods.
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	stdin.Close()
	shimLog.Close()
	repW.Close()
	if err != nil {
		return time.Time{}, fmt.Errorf("starting shim: %w", err)
	}
	// Until we reap it the pid cannot be reused, so this pidfd is exact.
	shimPid := proc.Pid // Release forgets it
	pidfd, err := unix.PidfdOpen(shimPid, unix.PIDFD_NONBLOCK)
	proc.Release()
	if err != nil {
		return time.Time{}, fmt.Errorf("pidfd for shim: %w", err)
	}
	in := &instance{id: spec.InstanceID, shimPid: shimPid, child: true, pidfd: pidfd}
	if place != nil {
		if err := place(in.shimPid); err != nil {
			unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
			r.reap(in)
			return time.Time{}, fmt.Errorf("placing the container: %w", err)
		}
		goW.Write([]byte{1})
	}

	repR.SetReadDeadline(time.Now().Add(StartTimeout))
	var rep shim.StartReport
	line, readErr := bufio.NewReader(repR).ReadBytes('\n')
	if readErr == nil {
		readErr = json.Unmarshal(line, &rep)
	}
	switch {
	case readErr != nil:
		// A shim that cannot say whether it started must not linger.
		unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		r.reap(in)
		return time.Time{}, fmt.Errorf("shim did not report: %v", readErr)
	case rep.Error != "":
		r.reap(in)
		return time.Time{}, errors.New(rep.Error)
	}
	r.watch(in)
	return rep.StartedAt, nil
}

// ownChild reports whether pid is this process's child.
func ownChild(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')') // the command may hold spaces and parentheses
	if i < 0 {
		return false
	}
	f := strings.Fields(string(data[i+1:])) // state, ppid, ...
	return len(f) > 1 && f[1] == strconv.Itoa(os.Getpid())
}

// reap waits for a shim that is about to exit and releases it.
func (r *Runtime) reap(in *instance) {
	fd, err := unix.Dup(in.pidfd)
	if err == nil {
		pidfd.Wait(fd)
	}
	if in.child {
		var ws unix.WaitStatus
		unix.Wait4(in.shimPid, &ws, 0, nil)
	}
	unix.Close(in.pidfd)
}

// watch follows an instance until its shim exits, then reports the exit.
func (r *Runtime) watch(in *instance) {
	r.mu.Lock()
	r.live[in.id] = in
	r.mu.Unlock()
	go func() {
		r.reap(in)
		r.mu.Lock()
		delete(r.live, in.id)
		r.mu.Unlock()
		r.exits <- exitOf(in.id, r.exitStatus(in.id))
	}()
}

// exitStatus reads what a finished shim recorded. A shim that died without
// recording (killed, crashed, power lost) leaves the status unknown; its
// leader, if it somehow survived, is killed so no copy outlives the record.
func (r *Runtime) exitStatus(id string) shim.ExitStatus {
	dir := r.instanceDir(id)
	r.removePrivate(id) // ended: nothing runs with it any more
	var st shim.ExitStatus
	if err := shim.ReadJSON(filepath.Join(dir, shim.ExitFile), &st); err == nil {
		return st
	}
	st = shim.Unlocated(time.Now())
	var ss shim.State
	if err := shim.ReadJSON(filepath.Join(dir, shim.StateFile), &ss); err == nil && ss.BootID == shim.BootID() {
		if fd, err := pidfd.Open(ss.LeaderPid, ss.LeaderStart); err == nil {
			unix.Kill(-ss.LeaderPid, unix.SIGKILL)
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			unix.Close(fd)
		}
		st.StartedAt = ss.StartedAt
	}
	return st
}

// Signal sends sig to the instance's main process (through its shim); 0
// is SIGTERM.
func (r *Runtime) Signal(id string, sig syscall.Signal) error {
	if sig == 0 {
		sig = unix.SIGTERM
	}
	r.mu.Lock()
	in := r.live[id]
	r.mu.Unlock()
	if in == nil {
		return fmt.Errorf("instance %s is not running", id)
	}
	if in.keeper != nil {
		return r.signalKept(in, sig)
	}
	if in.pidfd < 0 {
		return fmt.Errorf("instance %s: its lock is held by a process neither shim nor keeper; it ends when the lock comes free", id)
	}
	if err := unix.PidfdSendSignal(in.pidfd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("signal %v to instance %s: %w", sig, id, err)
	}
	return nil
}

// Kill SIGKILLs the instance's whole process tree.
func (r *Runtime) Kill(id string) error { return r.Signal(id, shim.KillSignal) }

// Remove deletes a finished instance's directory.
func (r *Runtime) Remove(id string) error {
	r.mu.Lock()
	_, alive := r.live[id]
	r.mu.Unlock()
	if alive {
		return fmt.Errorf("instance %s is still running", id)
	}
	r.removePrivate(id)
	return os.RemoveAll(r.instanceDir(id))
}

// Recover scans the instance directories after a daemon start: live ones
// are adopted and watched, finished ones report how they ended.
func (r *Runtime) Recover() ([]runtime.Found, error) {
	entries, err := os.ReadDir(r.dir)
	if err != nil {
		return nil, err
	}
	var out []runtime.Found
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		rec, ok := r.recoverOne(e.Name())
		if ok {
			out = append(out, rec)
		}
	}
	r.sweepPrivate()
	return out, nil
}

func (r *Runtime) recoverOne(id string) (runtime.Found, bool) {
	dir := r.instanceDir(id)
	var spec shim.Spec
	if err := shim.ReadJSON(filepath.Join(dir, shim.SpecFile), &spec); err != nil {
		// The daemon died before the shim could exist: nothing ran.
		r.log.Warn("removing incomplete instance directory", "instance", id, "err", err)
		r.removePrivate(id)
		os.RemoveAll(dir)
		return runtime.Found{}, false
	}
	rec := runtime.Found{InstanceID: spec.InstanceID, PodUID: types.UID(spec.PodUID), PodNamespace: spec.PodNamespace,
		PodName: spec.PodName, Container: spec.Container, Attempt: spec.Attempt}
	lock, err := os.OpenFile(filepath.Join(dir, shim.LockFile), os.O_RDWR, 0)
	if errors.Is(err, fs.ErrNotExist) {
		r.removePrivate(id)
		os.RemoveAll(dir)
		return rec, false
	}
	if err != nil {
		r.log.Error("instance lock", "instance", id, "err", err)
		return rec, false
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
		in, started, state := r.adopt(id, lock)
		switch state {
		case adopted:
			rec.Alive, rec.StartedAt = true, started
			if in.keeper == nil {
				r.watch(in)
			}
			return rec, true
		case undescribed:
			// A locked instance is alive, whatever it failed to say: it
			// may not be written off while it could still start its
			// container.
			if !r.killUndescribed(id, lock) {
				// Reported ended, it could be started again beside
				// itself: it is reported when its lock comes free.
				r.awaitLock(id)
				rec.Alive = true
				return rec, true
			}
		}
	}
	// Nobody holds the lock: the shim is gone.
	exit := exitOf(rec.InstanceID, r.exitStatus(id))
	rec.Exit, rec.StartedAt = &exit, exit.StartedAt
	return rec, true
}

// killUndescribed kills the shim of a locked instance that never wrote its
// state (its container dies with it through the parent-death signal), or
// has every keeper of the data directory kill it, and reports whether its
// lock came free.
func (r *Runtime) killUndescribed(id string, lock *os.File) bool {
	r.keepers.killEverywhere(id)
	dir := r.instanceDir(id)
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, c := range cmdlines {
		data, err := os.ReadFile(c)
		if err != nil || !strings.HasSuffix(strings.TrimRight(string(data), "\x00"), "\x00"+dir) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(c))); err == nil {
			r.log.Warn("killing a shim that never described itself", "instance", id, "pid", pid)
			unix.Kill(pid, unix.SIGKILL)
		}
	}
	for wait := time.Millisecond; wait < undescribedWait; wait *= 2 {
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			return true
		}
		time.Sleep(wait)
	}
	r.log.Error("an instance lock stays held after its shim was killed; it counts as running until it is free", "instance", id)
	return false
}

// undescribedWait bounds the last step of the doubling waits for a locked
// instance's state, and for its lock once it was killed (~16 s in all).
var undescribedWait = 10 * time.Second

// adoptSleep is adopt's wait between looks for a locked instance's state;
// tests add the waits up instead of timing them.
var adoptSleep = time.Sleep

// What adopt found of a locked instance.
type adoption int

const (
	adopted     adoption = iota
	ended                // its keeper finished it meanwhile: the exit is recorded
	undescribed          // no shim or keeper could be found for it
)

// adopt finds the live shim or keeper of an instance whose lock is held.
func (r *Runtime) adopt(id string, lock *os.File) (*instance, time.Time, adoption) {
	path := filepath.Join(r.instanceDir(id), shim.StateFile)
	// A shim that was just forked writes its state within milliseconds;
	// a loaded machine may take longer.
	for wait := time.Millisecond; wait < undescribedWait; wait *= 2 {
		if wait == askKeepersAfter {
			// A keeper writes the state once it has forked, but runs the
			// instance from the moment it took its lock.
			if in, state, ok := r.keepers.adoptUndescribed(id, lock); ok {
				var ss shim.State
				shim.ReadJSON(path, &ss)
				return in, ss.StartedAt, state
			}
		}
		var ss shim.State
		if err := shim.ReadJSON(path, &ss); err == nil {
			if ss.Keeper != "" {
				in, alive, err := r.adoptKept(id, ss)
				switch {
				case err != nil:
					r.log.Error("instance is locked but its keeper does not answer", "instance", id, "keeper", ss.Keeper, "err", err)
					return nil, time.Time{}, undescribed
				case !alive:
					return nil, time.Time{}, ended
				}
				return in, ss.StartedAt, adopted
			}
			fd, err := pidfd.Open(ss.ShimPid, ss.ShimStart)
			if err != nil {
				return nil, time.Time{}, undescribed
			}
			// A daemon that executed a new version in its own process
			// (the self-update) is still the parent of the shims it
			// started: it reaps them, or they stay zombies.
			return &instance{id: id, shimPid: ss.ShimPid, pidfd: fd, child: ownChild(ss.ShimPid)}, ss.StartedAt, adopted
		}
		adoptSleep(wait)
	}
	if in, state, ok := r.keepers.adoptUndescribed(id, lock); ok {
		return in, time.Time{}, state
	}
	r.log.Error("instance is locked but its shim never described itself", "instance", id)
	return nil, time.Time{}, undescribed
}

// exitOf is the exit a shim recorded, as the daemon keeps it.
func exitOf(id string, st shim.ExitStatus) runtime.Exit {
	return runtime.Exit{InstanceID: id, ExitCode: st.ExitCode, Signal: st.Signal, Reason: st.Reason,
		Message: st.Message, StartedAt: st.StartedAt, FinishedAt: st.FinishedAt}
}
