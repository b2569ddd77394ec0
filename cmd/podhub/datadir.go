package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"syscall"

	"golang.org/x/sys/unix"
)

// prepareDataDir checks the data directory before podhub trusts anything
// in it: a directory owned by this user that nobody else may write
// (anyone who can would replace the keys, the CA or the database). init
// creates it 0700; serve wants it to exist.
func prepareDataDir(dir string, create bool) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		if !create {
			return fmt.Errorf("data directory %s does not exist (run podhub init)", dir)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("data directory: %w", err)
		}
		return os.Chmod(dir, 0o700) // whatever the umask
	}
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if fi.Mode()&os.ModeSymlink != 0 {
		if fi, err = os.Stat(dir); err != nil {
			return fmt.Errorf("data directory %s: %w", dir, err)
		}
	}
	return checkPrivateDir(dir, fi)
}

// checkPrivateDir refuses a directory another user owns or may write.
func checkPrivateDir(dir string, fi os.FileInfo) error {
	if !fi.IsDir() {
		return fmt.Errorf("data directory %s: not a directory", dir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if ok && int(st.Uid) != os.Geteuid() {
		return fmt.Errorf("data directory %s: owned by uid %d, not by this user (uid %d): refusing keys and a database others control", dir, st.Uid, os.Geteuid())
	}
	if perm := fi.Mode().Perm(); perm&0o022 != 0 {
		return fmt.Errorf("data directory %s: mode %#o lets other users write it; chmod go-w %s (0700 recommended)", dir, perm, dir)
	}
	return nil
}

// lockInstance takes the data directory's instance lock, held until the
// returned function runs (or the process exits).
func lockInstance(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another podhub serve is running with data directory %s (it holds %s)", filepath.Dir(path), path)
		}
		return nil, fmt.Errorf("instance lock %s: %w", path, err)
	}
	return func() { f.Close() }, nil
}

// writeFileMode writes a new file with exactly mode, whatever the umask,
// refusing to follow a symlink planted in its place.
func writeFileMode(path string, data []byte, mode os.FileMode) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, mode)
	if err != nil {
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// replyJSON answers as the hub's API does: the value, or {"error": ...}
// with 400.
func replyJSON(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	json.NewEncoder(w).Encode(v)
}
