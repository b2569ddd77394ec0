package safepath

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// BindAt bind-mounts (recursively, as runc's rbind would) what f holds
// onto target, replacing whatever an earlier BindAt left there. target is
// a staging path of the caller's, under directories no container can
// write to: a runtime handed target mounts exactly f's file, since there
// is no link left on the way for it to follow. The kubelet does the same
// under /var/lib/kubelet/pods/<uid>/volume-subpaths.
func BindAt(f *os.File, target string) error {
	if err := unmountAll(target); err != nil {
		return err
	}
	dir, err := IsDir(f)
	if err != nil {
		return err
	}
	if err := makeTarget(target, dir); err != nil {
		return err
	}
	if err := unix.Mount(ProcPath(f), target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("bind-mounting %s onto %s: %w", f.Name(), target, err)
	}
	return nil
}

// Unbind unmounts everything mounted on target and removes it. It never
// removes more than the empty mount point: if something is still mounted
// there, removal fails instead of reaching into the volume.
func Unbind(target string) error {
	if err := unmountAll(target); err != nil {
		return err
	}
	if err := os.Remove(target); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// unmountAll detaches every mount stacked on target.
func unmountAll(target string) error {
	for range 64 {
		switch err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err {
		case nil:
		case unix.EINVAL, unix.ENOENT:
			return nil // not (or no longer) a mount point
		default:
			return fmt.Errorf("unmounting %s: %w", target, err)
		}
	}
	return fmt.Errorf("unmounting %s: still mounted after 64 unmounts", target)
}

// makeTarget makes target a directory or an empty file, as the source
// is, replacing a node of the other kind left by an earlier bind.
func makeTarget(target string, dir bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err == nil {
		if isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR; isDir == dir && (dir || st.Mode&unix.S_IFMT == unix.S_IFREG) {
			return nil
		}
		if err := os.Remove(target); err != nil {
			return err
		}
	}
	if dir {
		return os.Mkdir(target, 0o750)
	}
	fd, err := unix.Open(target, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640)
	if err != nil {
		return &os.PathError{Op: "create", Path: target, Err: err}
	}
	return unix.Close(fd)
}
