package process

import (
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// askKeepersAfter is how long adopt waits for a locked instance's state
// before it asks the keepers whether one of them runs it.
const askKeepersAfter = 128 * time.Millisecond // a step of adopt's doubling wait

// sockets lists the control sockets of every keeper version in the data
// directory; none where the instances could not be a keeper's.
func (ks *keepers) sockets() []string {
	if filepath.Base(ks.r.dir) != shim.InstancesDir {
		return nil
	}
	socks, _ := filepath.Glob(filepath.Join(ks.dataDir(), "keeper-*.sock"))
	return socks
}

// adoptUndescribed adopts a locked instance without state (the daemon
// went while a keeper was starting it) from the keeper that runs it; ok
// is false if none does. The lock is the instance's, opened by the caller:
// an instance whose exit was reported before it was followed is found
// ended by taking it.
func (ks *keepers) adoptUndescribed(id string, lock *os.File) (in *instance, state adoption, ok bool) {
	r := ks.r
	for _, sock := range ks.sockets() {
		kc, err := ks.watch(sock, 0, 0)
		if err != nil {
			continue
		}
		r.mu.Lock()
		runs := kc.live[id] && r.live[id] == nil
		if runs {
			delete(kc.live, id)
			in = &instance{id: id, keeper: kc, pidfd: -1}
			r.live[id] = in
		}
		r.mu.Unlock()
		if !runs {
			continue
		}
		// The keeper frees the lock before it tells its exit: free now,
		// the exit may have come before the instance was followed.
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
			r.mu.Lock()
			mine := r.live[id] == in
			if mine {
				delete(r.live, id)
			}
			r.mu.Unlock()
			if mine {
				return nil, ended, true
			}
		}
		r.log.Warn("adopted an instance its keeper runs but has not described yet", "instance", id, "keeper", sock)
		return in, adopted, true
	}
	return nil, undescribed, false
}

// killEverywhere asks every keeper of the data directory to kill the
// instance: one that runs it without having described it (a keeper
// ignores an instance it does not run).
func (ks *keepers) killEverywhere(id string) {
	for _, sock := range ks.sockets() {
		ks.request(sock, shim.KeeperRequest{Op: shim.KeeperSignal, Instance: id, Signal: int(shim.KillSignal)})
	}
}

// awaitLock follows a locked instance that nothing could kill: it counts
// as running, and its exit is reported once its lock is free.
func (r *Runtime) awaitLock(id string) {
	in := &instance{id: id, pidfd: -1}
	r.mu.Lock()
	r.live[id] = in
	r.mu.Unlock()
	go func() {
		if lock, err := os.Open(filepath.Join(r.instanceDir(id), shim.LockFile)); err == nil {
			for unix.Flock(int(lock.Fd()), unix.LOCK_EX) == unix.EINTR {
			}
			lock.Close()
		}
		r.mu.Lock()
		delete(r.live, id)
		r.mu.Unlock()
		r.exits <- exitOf(id, r.exitStatus(id))
	}()
}

// keeperLogMax is the size past which keeper.log is moved to keeper.log.1
// when a keeper is launched (a keeper writes only its errors there).
const keeperLogMax = 1 << 20

// rotateLog moves path to path.1, replacing it, once path exceeds max.
func rotateLog(path string, max int64) {
	if st, err := os.Stat(path); err == nil && st.Size() > max {
		os.Rename(path, path+".1")
	}
}

// removeDeadVersions removes the lock and socket of every other keeper
// version that no live keeper holds: each version leaves a pair behind,
// and a device upgraded often would collect them. Whether a keeper lives
// is asked of its lock; a keeper that takes a lock file unlinked under it
// takes the new one (shim.RunKeeper checks the path still names it).
func (ks *keepers) removeDeadVersions() {
	dir := ks.dataDir()
	versions := map[string]bool{}
	for _, pattern := range []string{"keeper-*.lock", "keeper-*.sock"} {
		paths, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, p := range paths {
			name := filepath.Base(p)
			versions[name[len("keeper-"):len(name)-len(".lock")]] = true
		}
	}
	for v := range versions {
		sock, lockPath := shim.KeeperSocket(dir, v), filepath.Join(dir, "keeper-"+v+".lock")
		if sock == ks.socket {
			continue
		}
		lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			continue
		}
		if unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
			lock.Close() // a live keeper's
			continue
		}
		// No keeper of v lives, and none serves while the lock is ours.
		os.Remove(sock)
		os.Remove(lockPath)
		lock.Close()
		ks.r.log.Debug("removed a gone keeper version's socket and lock", "version", v)
	}
}
