// Package hostcmd says how a container's command runs as a host process:
// where it is found (the container's PATH, not the daemon's) and whose
// credentials it runs with. The process runtime's shim, its exec and the
// probes' exec handlers all follow it.
package hostcmd

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// DefaultPath is PATH for containers that do not set one.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// LookPath resolves a command in the container's PATH, not the daemon's.
func LookPath(name string, env []string) (string, error) {
	if strings.Contains(name, "/") {
		return name, nil
	}
	path := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("exec: %q: executable file not found in $PATH", name)
}

// Credential is the credential to run as uid and gid, each defaulting to
// this process's; nil when neither is set. Run by root, it also clears
// the supplementary groups, as runc does: a process run as a user must
// not keep root's groups (group 0 reads what root's group may).
func Credential(uid, gid *uint32) *syscall.Credential {
	if uid == nil && gid == nil {
		return nil
	}
	cred := &syscall.Credential{Uid: uint32(os.Getuid()), Gid: uint32(os.Getgid()), NoSetGroups: os.Getuid() != 0}
	if uid != nil {
		cred.Uid = *uid
	}
	if gid != nil {
		cred.Gid = *gid
	}
	return cred
}

// InMountNS runs start, which starts a process (exec.Cmd.Start), on a
// thread that has joined the mount namespace ns: the process starts
// there, and start's look-ups (LookPath) see what it will. Go runs
// nothing between fork and exec, so the thread that forks joins instead.
// It leaves the process's shared root and working directory first (the
// kernel lets only a thread of its own file system attributes change
// mount namespace), goes back afterwards, and is never used again: it
// ends with its goroutine (the main thread, which Go never ends, is
// parked). Joining needs CAP_SYS_ADMIN and CAP_SYS_CHROOT.
func InMountNS(ns *os.File, start func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: see above
		errc <- inMountNS(ns, start)
	}()
	return <-errc
}

func inMountNS(ns *os.File, start func() error) error {
	home, err := os.Open("/proc/thread-self/ns/mnt")
	if err != nil {
		return fmt.Errorf("entering the container's mount namespace: %w", err)
	}
	defer home.Close()
	cwd, err := os.Open(".")
	if err != nil {
		return fmt.Errorf("entering the container's mount namespace: %w", err)
	}
	defer cwd.Close()
	if err := unix.Unshare(unix.CLONE_FS); err != nil {
		return fmt.Errorf("entering the container's mount namespace: %w", err)
	}
	if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("entering the container's mount namespace: %w", err)
	}
	err = start()
	// Back, so that a thread Go keeps (the main one) holds nothing of
	// the container's namespace alive and sees the host. Failing that
	// (it cannot, with the rights to come in), the thread stays locked
	// and runs nothing else.
	if berr := unix.Setns(int(home.Fd()), unix.CLONE_NEWNS); berr != nil {
		return errors.Join(err, fmt.Errorf("returning to the host's mount namespace: %w", berr))
	}
	if berr := unix.Fchdir(int(cwd.Fd())); berr != nil {
		return errors.Join(err, fmt.Errorf("returning to the working directory: %w", berr))
	}
	return err
}
