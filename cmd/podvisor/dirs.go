package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// privateDir makes sure dir is the daemon's alone, creating it 0700 if it
// does not exist. Whoever can write to the data directory (or rename it
// away through a parent) can plant pods' instance files, logs and the
// state database, so an existing directory that someone else owns or may
// write to is refused, not silently used. A parent writable by others is
// refused too unless it has the sticky bit (/tmp), where others cannot
// rename what is ours.
func privateDir(what, dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, err)
	}
	if _, err := os.Lstat(abs); errors.Is(err, fs.ErrNotExist) {
		if err := checkAncestors(what, abs); err != nil {
			return err
		}
		if err := os.MkdirAll(abs, 0o700); err != nil {
			return fmt.Errorf("%s %s: %w", what, dir, err)
		}
	}
	resolved, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, err)
	}
	st, err := os.Stat(resolved)
	if err != nil {
		return fmt.Errorf("%s %s: %w", what, dir, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s %s: not a directory", what, dir)
	}
	if why := unsafeDir(st, os.Geteuid(), false); why != "" {
		return fmt.Errorf("%s %s (mode %s, owner uid %d): %s; fix it (e.g. chown root and chmod 0700) or choose another directory",
			what, resolved, st.Mode().Perm(), ownerUID(st), why)
	}
	return checkAncestors(what, resolved)
}

// checkAncestors refuses a path whose existing parents could be swapped
// by someone else.
func checkAncestors(what, path string) error {
	for p := filepath.Dir(path); ; p = filepath.Dir(p) {
		if st, err := os.Stat(p); err == nil {
			if why := unsafeDir(st, os.Geteuid(), true); why != "" {
				return fmt.Errorf("%s %s: its parent %s (mode %s, owner uid %d) %s; fix the parent or choose another directory",
					what, path, p, st.Mode().Perm()|st.Mode()&fs.ModeSticky, ownerUID(st), why)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// unsafeDir says why a directory is not safe for the daemon's state, or
// "". Owners other than root and the daemon's own user are foreign; group-
// or world-writable is unsafe, except for a parent with the sticky bit.
func unsafeDir(st fs.FileInfo, euid int, parent bool) string {
	if uid := ownerUID(st); uid != 0 && uid != euid {
		return "is owned by another user"
	}
	if st.Mode().Perm()&0o022 != 0 && !(parent && st.Mode()&fs.ModeSticky != 0) {
		return "is writable by group or others"
	}
	return ""
}

func ownerUID(st fs.FileInfo) int {
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		return int(sys.Uid)
	}
	return -1
}
