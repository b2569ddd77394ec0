package shim

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// keeperRequestTimeout bounds how long a keeper waits for a request.
const keeperRequestTimeout = 10 * time.Second

// forkThread forks and reaps every container. It keeps its OS thread
// locked for the keeper's whole life: a leader's parent-death signal fires
// when the thread that forked it exits, so containers die with the keeper
// and never before.
func (k *keeper) forkThread() {
	runtime.LockOSThread()
	signal.Notify(k.sigchld, unix.SIGCHLD)
	var ending <-chan time.Time
	for {
		select {
		case r := <-k.forks:
			r.done <- k.fork(r.k)
		case <-k.sigchld:
		case <-ending:
		}
		k.reapAll()
		ending = nil
		if k.endInstances() {
			// Descendants still to kill: look again soon, as a shim's
			// wait loop does until nothing is left.
			ending = time.After(20 * time.Millisecond)
		}
	}
}

// fork starts an instance's leader with its output copied to its log.
func (k *keeper) fork(in *kept) error {
	k.mu.Lock()
	killed, broken := in.killed, k.broken
	k.mu.Unlock()
	if broken != nil {
		return fmt.Errorf("the keeper is exiting: %w", broken)
	}
	if killed {
		return errors.New("killed before it started")
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return err
	}
	in.started = time.Now()
	sh := &shim{dir: in.dir, spec: in.spec}
	k.forking.Lock()
	pid, err := sh.fork(outW, errW)
	k.forking.Unlock()
	outW.Close()
	errW.Close()
	if sh.restoreErr != nil {
		if err == nil {
			// Not started: it goes before its start is failed.
			unix.Kill(-pid, unix.SIGKILL)
			unix.Kill(pid, unix.SIGKILL)
			var ws unix.WaitStatus
			unix.Wait4(pid, &ws, 0, nil)
			killCgroup(in.spec.Cgroup)
		}
		k.mu.Lock()
		k.broken = sh.restoreErr
		k.mu.Unlock()
		err = fmt.Errorf("%w; the keeper exits, a new one runs the next start", sh.restoreErr)
	}
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	// Our unreaped child: this pidfd names it exactly until it is closed.
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		fd = -1
	} else {
		unix.CloseOnExec(fd)
	}
	in.copying.Add(2)
	for name, r := range map[string]*os.File{"stdout": outR, "stderr": errR} {
		if err := k.copy.add(r, name, in.logs, in.copying.Done); err != nil {
			os.Stderr.WriteString("keeper: copying " + name + " of " + in.id + ": " + err.Error() + "\n")
			in.copying.Done()
		}
	}
	k.mu.Lock()
	in.leader, in.pidfd = pid, fd
	k.byPid[pid] = in
	if in.killed { // while it forked
		k.killTree(in)
	}
	k.mu.Unlock()
	return nil
}

// reapAll reaps every child that has ended; a leader's status is kept.
func (k *keeper) reapAll() {
	k.forking.Lock() // no child is between its fork and its placement
	defer k.forking.Unlock()
	for {
		k.mu.Lock()
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			k.mu.Unlock()
			continue
		}
		if err != nil || pid <= 0 {
			k.mu.Unlock()
			return
		}
		if in := k.byPid[pid]; in != nil && !in.reaped {
			in.reaped, in.status = true, ws
			if in.pidfd >= 0 {
				unix.Close(in.pidfd)
				in.pidfd = -1
			}
		}
		k.mu.Unlock()
	}
}

// endInstances kills what is left of every container whose leader is
// reaped: its process group and its cgroups. An instance with neither
// left is finished. It reports whether any still has processes.
func (k *keeper) endInstances() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	more := false
	for pid, in := range k.byPid {
		if !in.reaped {
			continue
		}
		if !in.oom && in.status.Signaled() && in.status.Signal() == unix.SIGKILL {
			in.oom = (&shim{spec: in.spec}).oomKilled()
		}
		// The group is signalled only until it is seen empty: after that
		// its id may be reused.
		groupLeft := false
		if !in.groupGone {
			groupLeft = unix.Kill(-pid, unix.SIGKILL) == nil
			in.groupGone = !groupLeft
		}
		cgLeft := cgroupPids(in.spec.Cgroup)
		for _, p := range cgLeft {
			unix.Kill(p, unix.SIGKILL)
		}
		if groupLeft || len(cgLeft) > 0 {
			more = true
			continue
		}
		delete(k.byPid, pid)
		go k.finish(in)
	}
	return more
}

// finish records how an instance ended, then releases its lock and tells
// the watchers: "lock free" always means "exit recorded".
func (k *keeper) finish(in *kept) {
	// Every writer of the pipes is gone; drain what they left, but do not
	// hang on a descendant that escaped with a copy of the pipe.
	drained := make(chan struct{})
	go func() { in.copying.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(2 * time.Second):
		k.copy.drop(in.logs)
	}
	st := exitStatusOf(in.status, in.started)
	if in.oom {
		st.Reason = "OOMKilled"
	}
	if err := WriteJSONAtomic(filepath.Join(in.dir, ExitFile), st); err != nil {
		os.Stderr.WriteString("keeper: writing exit status of " + in.id + ": " + err.Error() + "\n")
	}
	in.logs.close()
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.byID, in.id)
	in.lock.Close()
	if data, err := jsonLine(KeeperReply{Exited: in.id}); err == nil {
		for c := range k.watchers {
			c.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := c.Write(data); err != nil {
				c.Close() // a daemon that does not read re-watches
				delete(k.watchers, c)
			}
		}
	}
	k.quitIfDone()
}
