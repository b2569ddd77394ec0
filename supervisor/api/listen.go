package api

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
)

// SocketMode is the API socket's mode: root and its group only, which is
// what keeps unprivileged users out.
const SocketMode = 0o660

// socket is the API socket held by one daemon: a lock beside it
// (<socket>.lock) proves no other daemon uses the path, so a second daemon
// fails instead of unlinking the first one's socket.
type socket struct {
	path string
	lock *os.File
	log  *slog.Logger

	watcher *fsnotify.Watcher // nil: deletions go unnoticed

	mu  sync.Mutex
	ln  net.Listener
	ino uint64 // the inode we bound, to tell our socket from a stranger's
	dev uint64
}

// lockSocket takes <path>.lock.
func lockSocket(path string) (*os.File, error) {
	name := path + ".lock"
	f, err := LockFile(name)
	switch {
	case errors.Is(err, unix.EWOULDBLOCK):
		return nil, fmt.Errorf("API socket %s is in use by another podvisor (%s is locked); its socket was left alone", path, name)
	case err != nil:
		return nil, fmt.Errorf("API socket lock %s: %w", name, err)
	}
	return f, nil
}

// LockFile opens (creating, never through a link) and exclusively flocks
// name. A daemon forking at the moment leaves a lock with its child until
// that child's exec closes it, so a held lock is retried for about a
// second before the error, which wraps unix.EWOULDBLOCK, says it is held.
func LockFile(name string) (*os.File, error) {
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, err
	}
	for wait := time.Millisecond; ; wait *= 2 {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, unix.EWOULDBLOCK) || wait > time.Second {
			break
		}
		time.Sleep(wait)
	}
	f.Close()
	return nil, fmt.Errorf("locking %s: %w", name, err)
}

// listen binds the socket path, replacing a stale socket (the lock proves
// no live daemon owns it) but never anything that is not a socket.
func (k *socket) listen() (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(k.path), 0o700); err != nil {
		return nil, fmt.Errorf("API socket directory: %w", err)
	}
	if st, err := os.Lstat(k.path); err == nil && st.Mode()&fs.ModeSocket == 0 {
		return nil, fmt.Errorf("API socket %s: exists and is not a socket (%s); not replacing it", k.path, st.Mode())
	}
	ln, err := bindPrivately(k.path)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Lstat(k.path, &st); err != nil {
		ln.Close()
		return nil, fmt.Errorf("API socket %s: %w", k.path, err)
	}
	k.mu.Lock()
	old := k.ln
	k.ln, k.ino, k.dev = ln, st.Ino, uint64(st.Dev)
	k.mu.Unlock()
	if old != nil {
		old.Close()
	}
	return ln, nil
}

// bindPrivately binds a unix socket at path with SocketMode. A socket is
// created with the umask's mode, which could let anyone connect until a
// chmod; so it is bound in a fresh 0700 directory, given its mode, and
// renamed into place (replacing a stale socket at once). A path too long
// for that is bound in place.
func bindPrivately(path string) (net.Listener, error) {
	stage, err := os.MkdirTemp(filepath.Dir(path), ".sock-")
	if err != nil {
		return nil, fmt.Errorf("API socket %s: %w", path, err)
	}
	defer os.RemoveAll(stage)
	at := filepath.Join(stage, filepath.Base(path))
	if len(at) >= len(unix.RawSockaddrUnix{}.Path) {
		os.Remove(path)
		at = path
	}
	ln, err := net.Listen("unix", at)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", path, err)
	}
	// Closing a replaced listener must not unlink the path: it may name
	// the new socket by then. close removes the path itself, if ours.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(at, SocketMode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("API socket %s: %w", path, err)
	}
	if at != path {
		if err := os.Rename(at, path); err != nil {
			ln.Close()
			return nil, fmt.Errorf("API socket %s: %w", path, err)
		}
	}
	return ln, nil
}

// ours reports whether the path still names the socket we bound.
func (k *socket) ours() bool {
	var st unix.Stat_t
	if err := unix.Lstat(k.path, &st); err != nil {
		return false
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return st.Ino == k.ino && uint64(st.Dev) == k.dev && st.Mode&unix.S_IFMT == unix.S_IFSOCK
}

// startWatch watches the socket's directory; it comes before the socket
// is bound so that no deletion goes unseen.
func (k *socket) startWatch() error {
	dir := filepath.Dir(k.path)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching the API socket's directory %s: %w", dir, err)
	}
	if err := w.Add(dir); err != nil {
		w.Close()
		return fmt.Errorf("watching the API socket's directory %s: %w", dir, err)
	}
	k.watcher = w
	return nil
}

// watch re-creates the socket whenever its path is deleted or moved away
// (a cleanup script, an over-eager tmpfiles rule), and its directory too:
// the daemon must stay reachable. It waits on inotify, not a timer, and
// hands every new listener to serve.
func (k *socket) watch(ctx context.Context, serve func(net.Listener)) {
	dir, w := filepath.Dir(k.path), k.watcher
	if w == nil {
		return
	}
	go func() {
		defer w.Close()
		for {
			select {
			case <-ctx.Done():
				return
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				k.log.Warn("API socket watch error", "dir", dir, "err", err)
			case ev, ok := <-w.Events:
				if !ok {
					return
				}
				dirGone := ev.Name == dir && (ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename))
				if !dirGone && (ev.Name != k.path || !ev.Has(fsnotify.Remove) && !ev.Has(fsnotify.Rename)) {
					continue
				}
				if ctx.Err() != nil {
					return
				}
				if dirGone {
					// The watch went with the directory: make it again.
					if err := os.MkdirAll(dir, 0o700); err != nil {
						k.log.Error("re-creating the API socket's directory", "dir", dir, "err", err)
					}
					if err := w.Add(dir); err != nil {
						k.log.Error("watching the API socket's directory again", "dir", dir, "err", err)
					}
				}
				if k.ours() {
					continue
				}
				k.log.Warn("API socket was removed; re-creating it", "socket", k.path)
				ln, err := k.listen()
				if err != nil {
					k.log.Error("re-creating the API socket", "err", err)
					continue
				}
				serve(ln)
			}
		}
	}()
}

// close stops listening, removes the socket if it is still ours and
// releases the lock.
func (k *socket) close() {
	k.mu.Lock()
	ln := k.ln
	k.mu.Unlock()
	if k.watcher != nil {
		k.watcher.Close()
	}
	if ln != nil {
		if k.ours() {
			os.Remove(k.path)
		}
		ln.Close()
	}
	k.lock.Close()
}

// isClosed reports whether a Serve error only says its listener was
// closed (replaced, or shut down).
func isClosed(err error) bool {
	return errors.Is(err, net.ErrClosed)
}
