package runtime

import (
	"fmt"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// A container whose environment holds a Secret's data keeps it on a
// memory-backed file system only, never on the data directory's disk:
// PrivateDir (<data-dir>/private), a tmpfs (0700) the daemon mounts unless
// it is memory-backed already, shared by the process and containerd
// runtimes. It lives until the device reboots, so a restarted daemon
// finds what it holds.

// PrivateDir is the name of the private directory in the data directory.
const PrivateDir = "private"

// Sizing of the private specs' tmpfs: only what is written is charged, so
// the size only caps it; it grows when a spec needs more room.
const (
	privateTmpfsSize     = 1 << 20
	privateTmpfsHeadroom = 256 << 10
)

// memFSMu keeps two runtimes from mounting the same directory at once.
var memFSMu sync.Mutex

// EnsureMemoryFS mounts a tmpfs (0700) at dir unless dir is on one (or a
// ramfs) already, and grows a tmpfs that has less than need bytes free.
func EnsureMemoryFS(dir string, need int64) error {
	memFSMu.Lock()
	defer memFSMu.Unlock()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return err
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	switch uint32(st.Type) { // int32 on 32-bit ARM, where ramfs's is negative
	case unix.RAMFS_MAGIC:
		return nil
	case unix.TMPFS_MAGIC:
		free := int64(st.Bavail) * int64(st.Bsize)
		if free >= need+privateTmpfsHeadroom {
			return nil
		}
		if !isMountPoint(dir) {
			return fmt.Errorf("%d bytes free on its tmpfs, %d needed", free, need)
		}
		size := int64(st.Blocks-st.Bavail)*int64(st.Bsize) + need + privateTmpfsSize
		if err := unix.Mount("tmpfs", dir, "tmpfs", flags|unix.MS_REMOUNT, "size="+strconv.FormatInt(size, 10)); err != nil {
			return fmt.Errorf("growing its tmpfs to %d bytes: %w", size, err)
		}
		return nil
	}
	size := max(privateTmpfsSize, need+privateTmpfsSize)
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "mode=0700,size="+strconv.FormatInt(size, 10)); err != nil {
		return fmt.Errorf("mounting a tmpfs there: %w", err)
	}
	return nil
}

// isMountPoint reports whether dir is the root of a mount: its device
// differs from its parent's.
func isMountPoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
