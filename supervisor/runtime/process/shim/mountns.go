package shim

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/pod/hostcmd"
)

// A container with mounts (Spec.Mounts) runs in a mount namespace of its
// own. Go runs no code between fork and exec, so the namespace is made on
// the thread that forks, before the fork: the thread leaves its file
// system attributes shared with the process (unshare CLONE_NEWNS implies
// CLONE_FS), makes the copy a slave of the host's, binds the mounts, and
// forks; the child starts in the namespace, with the same pid it keeps,
// and the thread goes back (setns) to the namespace it came from. The
// namespace then lives exactly as long as the container's processes (and
// whatever holds /proc/PID/ns/mnt open, as exec does while it runs): the
// host's mount table never holds any of it.

// forkExec forks the container: at path, or, when it has mounts, in a
// mount namespace of its own, where its command is looked up (it may lie
// in one of them). A thread that could not go back is said in leaveErr:
// it must fork nothing else.
func (s *shim) forkExec(path string, attr *syscall.ProcAttr) (pid int, leaveErr, err error) {
	if len(s.spec.Mounts) == 0 {
		pid, err = forkExecAt(path, s.spec.Argv, attr)
		return pid, nil, err
	}
	leave, err := enterMountNS(s.spec.Container, s.spec.Mounts)
	if err != nil {
		return 0, nil, err
	}
	if path, err = hostcmd.LookPath(s.spec.Argv[0], s.spec.Env); err == nil {
		pid, err = forkExecAt(path, s.spec.Argv, attr)
	}
	return pid, leave(), err
}

func forkExecAt(path string, argv []string, attr *syscall.ProcAttr) (int, error) {
	pid, err := syscall.ForkExec(path, argv, attr)
	if err != nil {
		return 0, fmt.Errorf("exec %s: %w", path, err)
	}
	return pid, nil
}

// enterMountNS moves the calling goroutine's thread into a new mount
// namespace, a slave copy of its own, with mounts bound in order; leave
// takes the thread back. The thread stays locked to its goroutine for
// good: its root and working directory are its own from the unshare on.
func enterMountNS(container string, mounts []Mount) (leave func() error, err error) {
	runtime.LockOSThread()
	home, err := unix.Open("/proc/thread-self/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("opening the shim's mount namespace: %w", err)
	}
	cwd, err := unix.Open(".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(home)
		return nil, fmt.Errorf("opening the shim's working directory: %w", err)
	}
	leave = func() error {
		defer unix.Close(home)
		defer unix.Close(cwd)
		if err := unix.Setns(home, unix.CLONE_NEWNS); err != nil {
			return fmt.Errorf("returning to the shim's mount namespace: %w", err)
		}
		// setns moved the thread to the namespace's root directory.
		if err := unix.Fchdir(cwd); err != nil {
			return fmt.Errorf("returning to the shim's working directory: %w", err)
		}
		return nil
	}
	if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
		unix.Close(home)
		unix.Close(cwd)
		return nil, fmt.Errorf("a mount namespace for container %q: %w", container, err)
	}
	// Slave: nothing mounted or unmounted here reaches the host, while
	// what the host mounts and unmounts later still reaches the container
	// (a disk unmounted on the host is not held busy by it).
	err = unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, "")
	if err != nil {
		err = fmt.Errorf("a mount namespace for container %q: making / a slave: %w", container, err)
	}
	for i := 0; err == nil && i < len(mounts); i++ {
		err = bind(container, mounts[i])
	}
	if err != nil {
		return nil, errors.Join(err, leave())
	}
	return leave, nil
}

// bind mounts m.Source on m.Destination, read-only if m says so. The
// destination must exist, as a directory for a directory and a file for
// a file: nothing is created on the host.
func bind(container string, m Mount) error {
	src, err := os.Stat(m.Source)
	if err != nil {
		return fmt.Errorf("container %q: the volume for %s: %w", container, m.Destination, err)
	}
	dst, err := os.Stat(m.Destination)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("container %q: mountPath %s does not exist on the host; a process container's volumes are mounted over existing paths only, so that nothing is created on the host", container, m.Destination)
	case err != nil:
		return fmt.Errorf("container %q: mountPath %s: %w", container, m.Destination, err)
	case src.IsDir() && !dst.IsDir():
		return fmt.Errorf("container %q: mountPath %s is not a directory on the host, and the volume is one", container, m.Destination)
	case !src.IsDir() && dst.IsDir():
		return fmt.Errorf("container %q: mountPath %s is a directory on the host, and the volume's subPath is a file", container, m.Destination)
	}
	if err := unix.Mount(m.Source, m.Destination, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("container %q: mounting the volume at %s: %w", container, m.Destination, err)
	}
	if !m.ReadOnly {
		return nil
	}
	// A bind takes read-only only in a remount, which must keep the
	// flags the source has (nosuid, nodev, noexec), or loosen them.
	var st unix.Statfs_t
	if err := unix.Statfs(m.Destination, &st); err != nil {
		return fmt.Errorf("container %q: read-only mount at %s: %w", container, m.Destination, err)
	}
	keep := uintptr(st.Flags) & (unix.ST_NOSUID | unix.ST_NODEV | unix.ST_NOEXEC)
	if err := unix.Mount("", m.Destination, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|keep, ""); err != nil {
		return fmt.Errorf("container %q: making the mount at %s read-only: %w", container, m.Destination, err)
	}
	return nil
}
