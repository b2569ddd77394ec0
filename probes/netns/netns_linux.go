package netns

import (
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on a locked OS thread that has entered the network
// namespace bound at path (/proc/<pid>/ns/net, a bind mount) and returns
// what fn returns. The thread then goes back to its own namespace; one
// that cannot is thrown away with its goroutine, never reused.
func Do[T any](path string, fn func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		v, err, back := enter(path, fn)
		if back {
			runtime.UnlockOSThread()
		}
		done <- result{v, err}
	}()
	r := <-done
	return r.v, r.err
}

// enter runs fn in the namespace at path on the calling (locked) thread;
// back says whether the thread returned to its own namespace.
func enter[T any](path string, fn func() (T, error)) (v T, err error, back bool) {
	own, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return v, fmt.Errorf("open own network namespace: %w", err), true
	}
	defer unix.Close(own)
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return v, fmt.Errorf("open network namespace %s: %w", path, err), true
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return v, fmt.Errorf("enter network namespace %s: %w", path, err), true
	}
	v, err = fn()
	return v, err, unix.Setns(own, unix.CLONE_NEWNET) == nil
}

// Same says whether path is this process's own network namespace.
func Same(path string) bool {
	var a, b unix.Stat_t
	return unix.Stat(path, &a) == nil && unix.Stat("/proc/self/ns/net", &b) == nil && a.Ino == b.Ino && a.Dev == b.Dev
}
