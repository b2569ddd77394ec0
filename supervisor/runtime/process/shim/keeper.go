package shim

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// KeeperOOMScoreAdj is the keeper's own oom_score_adj: the OOM killer
// should take any container before the process that runs them all.
const KeeperOOMScoreAdj = -999

// keeper runs every container of one data directory: what a shim does for
// one container (parent and subreaper, log copier, reaper, exit recorder,
// holder of the instance lock), done by one process for all of them.
type keeper struct {
	dir     string
	version string
	socket  string
	// verLock is the version's lock, held for the keeper's life: kept
	// reachable, or the finalizer of an unused *os.File would let it go.
	verLock *os.File
	self    State // ShimPid, ShimStart, BootID, Keeper
	copy    *copier
	forks   chan forkRequest
	sigchld chan os.Signal

	// forking is held from a fork until its child is placed and
	// untraced: a Wait4(-1) by the reaper in that window could take the
	// child's exec stop meant for the forking thread, which then waits
	// for ever with the child stopped.
	forking  sync.Mutex
	mu       sync.Mutex
	byPid    map[int]*kept // leaders not yet reaped, and ending instances
	byID     map[string]*kept
	watchers map[*net.UnixConn]bool
	draining bool
	quit     chan struct{}
	// broken: after a fork the keeper could not leave the container's
	// cgroups or take back its oom_score_adj. Charged as (or OOM-killed
	// with) a container, it must not run on: it exits once the start that
	// found it out is answered, and its containers die with it.
	broken error
	exit   func(code int) // os.Exit
}

// kept is one running container instance.
type kept struct {
	id      string
	dir     string
	spec    Spec
	lock    *os.File
	logs    *logWriter
	copying sync.WaitGroup
	leader  int
	pidfd   int // exact until closed: signals never reach a reused pid
	started time.Time
	reaped  bool
	status  unix.WaitStatus
	oom     bool
	// killed: KillSignal came. One that comes while the instance is
	// still starting stops its fork, or kills the leader once forked.
	killed bool
	// groupGone: its process group was seen empty; the id may be
	// another group's since, so it is signalled no more.
	groupGone bool
}

type forkRequest struct {
	k    *kept
	done chan error
}

// RunKeeper is the body of "podvisor-shim --keeper DIR" (DIR is the data
// directory; instances are under DIR/containers): it listens on DIR's
// keeper socket for its version and runs the containers the daemon
// starts through it until it is told to drain and its last container has
// ended. It lives in its own session and outlives the daemon; if it dies,
// its containers die with it (parent-death signal) and their locks are
// free. The daemon knows it is up when its socket answers.
func RunKeeper(dir string) int {
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "podvisor-shim %s: %v\n", KeeperFlag, err)
		return 1
	}
	if err := checkDataDir(dir); err != nil {
		return fail(err)
	}
	version, err := KeeperVersion("/proc/self/exe")
	if err != nil {
		return fail(err)
	}
	// One keeper per version: a second one started by a race exits and the
	// daemon talks to the first.
	lock, err := lockKeeper(filepath.Join(dir, "keeper-"+version+".lock"), 2*time.Second)
	if err != nil {
		return fail(err)
	}
	if lock == nil {
		return 0 // the other one serves
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail(fmt.Errorf("becoming subreaper: %w", err))
	}
	// Without CAP_SYS_RESOURCE the keeper keeps the daemon's score.
	os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(KeeperOOMScoreAdj)), 0)
	k := &keeper{dir: dir, version: version, socket: KeeperSocket(dir, version), verLock: lock,
		forks: make(chan forkRequest), sigchld: make(chan os.Signal, 1),
		byPid: map[int]*kept{}, byID: map[string]*kept{}, watchers: map[*net.UnixConn]bool{}, quit: make(chan struct{}), exit: os.Exit}
	start, _ := ProcStartTime(os.Getpid())
	k.self = State{ShimPid: os.Getpid(), ShimStart: start, BootID: BootID(), Keeper: k.socket}
	if k.copy, err = newCopier(); err != nil {
		return fail(err)
	}
	ln, err := k.listen()
	if err != nil {
		return fail(err)
	}
	go k.forkThread()
	go k.serve(ln)
	<-k.quit
	ln.Close()
	os.Remove(k.socket)
	return 0
}

// checkDataDir refuses a data directory, or instances directory, that
// another user owns or may write to: the keeper runs the spec.json of every
// instance below it with its own privileges, and binds its socket there.
func checkDataDir(dir string) error {
	for _, d := range []string{dir, filepath.Join(dir, InstancesDir)} {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err != nil {
			return &os.PathError{Op: "stat", Path: d, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
			return fmt.Errorf("%s: not a directory of uid %d that only it may write to (mode %#o, uid %d)", d, os.Geteuid(), st.Mode&0o7777, st.Uid)
		}
	}
	return nil
}

// lockKeeper takes the keeper lock at path within d, or returns nil. The
// daemon removes a lock file no keeper holds (of a gone version) while it
// holds it: a lock taken on a file unlinked meanwhile is let go and the
// one now at path taken.
func lockKeeper(path string, d time.Duration) (*os.File, error) {
	deadline := time.Now().Add(d)
	for {
		lock, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, err
		}
		if !lockWithin(lock, time.Until(deadline)) {
			lock.Close()
			return nil, nil
		}
		var held, now unix.Stat_t
		if unix.Fstat(int(lock.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			return lock, nil
		}
		lock.Close()
	}
}

// lockWithin takes the keeper lock, waiting a little for a keeper that is
// on its way out (it unlinks its socket first, then lets go).
func lockWithin(lock *os.File, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

func (k *keeper) listen() (*net.UnixListener, error) {
	os.Remove(k.socket) // a dead keeper's; ours is locked above
	addr, release, err := sockaddr(k.socket)
	if err != nil {
		return nil, err
	}
	defer release()
	old := unix.Umask(0o177) // bound 0600 from the start, never wider
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: addr, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, err
	}
	// Closing unlinks the name it was bound to; through /proc/self/fd that
	// name is gone with the descriptor, so unlink the real path ourselves.
	ln.SetUnlinkOnClose(false)
	return ln, nil
}

func (k *keeper) serve(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			select {
			case <-k.quit:
				return
			default:
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like
			continue
		}
		go k.handle(c)
	}
}

// handle answers one request from a process of this keeper's own user.
func (k *keeper) handle(c *net.UnixConn) {
	cred, err := peerCred(c)
	if err != nil || int(cred.Uid) != os.Geteuid() {
		c.Close()
		return
	}
	c.SetReadDeadline(time.Now().Add(keeperRequestTimeout))
	req, fds, err := recvKeeper(c)
	c.SetReadDeadline(time.Time{})
	if err != nil {
		k.reply(c, KeeperReply{Error: err.Error()})
		c.Close()
		return
	}
	switch req.Op {
	case KeeperStart:
		var lock *os.File
		if len(fds) == 1 {
			lock = os.NewFile(uintptr(fds[0]), "lock")
		} else {
			closeAll(fds)
		}
		st, err := k.start(req.Instance, lock)
		rep := KeeperReply{Version: k.version, Started: st}
		if err != nil {
			rep.Error = err.Error()
		}
		k.reply(c, rep)
		k.exitIfBroken()
	case KeeperSignal:
		closeAll(fds)
		k.signal(req.Instance, syscall.Signal(req.Signal))
		k.reply(c, KeeperReply{Version: k.version})
	case KeeperWatch:
		closeAll(fds)
		k.mu.Lock()
		if k.quitting() {
			k.mu.Unlock()
			k.reply(c, KeeperReply{Error: KeeperRefused})
			break
		}
		rep := KeeperReply{Version: k.version, Live: []string{}}
		for id := range k.byID {
			rep.Live = append(rep.Live, id)
		}
		ok := k.reply(c, rep)
		if ok {
			k.watchers[c] = true
		}
		k.mu.Unlock()
		if ok {
			// The daemon never writes again; a read ends when it goes.
			var b [1]byte
			c.Read(b[:])
			k.mu.Lock()
			delete(k.watchers, c)
			k.quitIfDone()
			k.mu.Unlock()
		}
	case KeeperDrain:
		closeAll(fds)
		k.mu.Lock()
		k.draining = true
		k.quitIfDone()
		k.mu.Unlock()
		k.reply(c, KeeperReply{Version: k.version})
	case KeeperResume:
		closeAll(fds)
		k.mu.Lock()
		rep := KeeperReply{Version: k.version}
		if k.quitting() {
			rep.Error = KeeperRefused
		} else {
			k.draining = false
		}
		k.mu.Unlock()
		k.reply(c, rep)
	default:
		closeAll(fds)
		k.reply(c, KeeperReply{Error: fmt.Sprintf("unknown keeper request %q", req.Op)})
	}
	c.Close()
}

func (k *keeper) reply(c *net.UnixConn, rep KeeperReply) bool {
	data, err := jsonLine(rep)
	if err != nil {
		return false
	}
	c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Write(data)
	return err == nil
}

// exitIfBroken ends a broken keeper at once: no exit is recorded for its
// containers (their leaders die with it), as when it is killed.
func (k *keeper) exitIfBroken() {
	k.mu.Lock()
	broken := k.broken
	k.mu.Unlock()
	if broken != nil {
		fmt.Fprintf(os.Stderr, "podvisor-shim %s: %v: exiting\n", KeeperFlag, broken)
		k.exit(1)
	}
}

// quitIfDone ends a keeper with no container left that is draining or
// that no daemon watches (the daemon stopped its pods and went); k.mu
// held. A daemon that comes back starts a new one.
func (k *keeper) quitIfDone() {
	if (k.draining || len(k.watchers) == 0) && len(k.byID) == 0 && !k.quitting() {
		close(k.quit)
	}
}

// quitting reports whether the keeper is on its way out; k.mu held.
func (k *keeper) quitting() bool {
	select {
	case <-k.quit:
		return true
	default:
		return false
	}
}

// start runs the instance id with the lock the daemon holds and hands
// over. The lock is closed only once the instance has ended: started, its
// exit recorded; not started, a StartError recorded.
func (k *keeper) start(id string, lock *os.File) (*State, error) {
	if !ValidInstanceID(id) {
		if lock != nil {
			lock.Close()
		}
		return nil, fmt.Errorf("invalid instance %q", id)
	}
	dir := filepath.Join(k.dir, InstancesDir, id)
	if lock == nil {
		return nil, fmt.Errorf("instance %s: no lock handed over", id)
	}
	if err := k.checkLock(dir, lock); err != nil {
		lock.Close()
		return nil, fmt.Errorf("instance %s: %w", id, err)
	}
	in := &kept{id: id, dir: dir, lock: lock, pidfd: -1, started: time.Now()}
	k.mu.Lock()
	if k.draining || k.quitting() {
		k.mu.Unlock()
		lock.Close()
		return nil, errors.New(KeeperRefused)
	}
	if _, dup := k.byID[id]; dup {
		k.mu.Unlock()
		lock.Close()
		return nil, fmt.Errorf("instance %s runs already", id)
	}
	k.byID[id] = in
	k.mu.Unlock()
	var err error
	in.spec, err = ReadSpec(dir)
	if err == nil && (in.spec.InstanceID != id || len(in.spec.Argv) == 0) {
		err = errors.New("spec names another instance or no command")
	}
	if err == nil && in.spec.Cgroup.Await {
		err = errors.New("a keeper cannot wait to be placed (spec.cgroup.await)")
	}
	if err == nil && in.spec.Cgroup.Dir == "" && len(in.spec.Cgroup.Procs) == 0 {
		// Its cgroup is how the container's last process is found.
		err = errors.New("a keeper runs only containers with a cgroup of their own")
	}
	if err == nil {
		in.logs, err = openLog(in.spec.LogPath, in.spec.LogMaxBytes, in.spec.LogMaxFiles)
	}
	if err == nil {
		done := make(chan error, 1)
		k.forks <- forkRequest{k: in, done: done}
		err = <-done
	}
	if err != nil {
		st := ExitStatus{ExitCode: 128, Reason: "StartError", Message: err.Error(), StartedAt: in.started, FinishedAt: time.Now()}
		WriteJSONAtomic(filepath.Join(dir, ExitFile), st)
		if in.logs != nil {
			in.logs.close()
		}
		k.mu.Lock()
		delete(k.byID, id)
		lock.Close()
		k.quitIfDone()
		k.mu.Unlock()
		return nil, err
	}
	st := k.self
	st.LeaderPid, st.StartedAt = in.leader, in.started
	st.LeaderStart, _ = ProcStartTime(in.leader)
	if err := WriteJSONAtomic(filepath.Join(dir, StateFile), st); err != nil {
		// Without its state a restarted daemon finds the instance locked
		// but cannot adopt it, and would count it as ended while it runs.
		k.mu.Lock()
		in.killed = true
		k.killTree(in)
		k.mu.Unlock()
		return nil, fmt.Errorf("instance %s: recording its state (killed): %w", id, err)
	}
	return &st, nil
}

// checkLock makes sure lock is dir's lock file and this descriptor holds
// its flock (re-locking one's own lock succeeds; another holder's fails).
func (k *keeper) checkLock(dir string, lock *os.File) error {
	var want, got unix.Stat_t
	if err := unix.Lstat(filepath.Join(dir, LockFile), &want); err != nil {
		return err
	}
	if err := unix.Fstat(int(lock.Fd()), &got); err != nil {
		return err
	}
	if want.Dev != got.Dev || want.Ino != got.Ino {
		return errors.New("the descriptor handed over is not its lock file")
	}
	// Held by someone: a fresh open cannot take it...
	probe, err := os.Open(filepath.Join(dir, LockFile))
	if err != nil {
		return err
	}
	defer probe.Close()
	if unix.Flock(int(probe.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
		return errors.New("the lock handed over is not held")
	}
	// ...and by this very descriptor: re-locking one's own lock succeeds.
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		return fmt.Errorf("the lock handed over is held by another: %w", err)
	}
	return nil
}

// signal forwards sig to an instance's leader, or on KillSignal kills its
// whole tree. An ended or unknown instance has nothing left to signal.
func (k *keeper) signal(id string, sig syscall.Signal) {
	k.mu.Lock()
	defer k.mu.Unlock()
	in := k.byID[id]
	if in == nil {
		return
	}
	if sig == KillSignal {
		// Still starting (no leader yet), it is killed as it forks: the
		// daemon kills a start it got no answer to and waits for its lock.
		in.killed = true
		if in.leader != 0 {
			k.killTree(in)
		}
		return
	}
	if in.leader != 0 && sig > 0 && sig < 65 {
		signalLeader(in, sig)
	}
}

// killTree SIGKILLs an instance's leader, process group and cgroups; k.mu
// held.
func (k *keeper) killTree(in *kept) {
	if !in.reaped { // until reaped, the group is the container's
		unix.Kill(-in.leader, unix.SIGKILL)
	}
	signalLeader(in, unix.SIGKILL)
	killCgroup(in.spec.Cgroup)
}

// signalLeader signals an instance's leader through its pidfd or, without
// one, by pid while it is not reaped (an unreaped child's pid is not
// reused); k.mu held.
func signalLeader(in *kept, sig syscall.Signal) {
	switch {
	case in.pidfd >= 0:
		unix.PidfdSendSignal(in.pidfd, sig, nil, 0)
	case !in.reaped:
		unix.Kill(in.leader, sig)
	}
}

// killCgroup SIGKILLs every process in a container's own cgroups, where
// it has them: what left its process group is still there.
func killCgroup(cg Cgroup) {
	for _, pid := range cgroupPids(cg) {
		unix.Kill(pid, unix.SIGKILL)
	}
}

func cgroupPids(cg Cgroup) []int {
	files := cg.Procs
	if cg.Dir != "" {
		files = append([]string{filepath.Join(cg.Dir, "cgroup.procs")}, files...)
	}
	var out []int
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(s); err == nil && pid != os.Getpid() {
				out = append(out, pid)
			}
		}
	}
	return out
}
