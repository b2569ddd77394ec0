// Package hostcmd says how a container's command runs as a host process:
// where it is found (the container's PATH, not the daemon's) and whose
// credentials it runs with. The process runtime's shim, its exec and the
// probes' exec handlers all follow it.
package hostcmd

import (
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
// thread of its own that has joined the mount namespace ns: the process
// starts there, and start's look-ups (LookPath) see what it will. Go runs
// nothing between fork and exec, so the thread that forks joins instead;
// it leaves the process's shared root and working directory first (the
// kernel lets only a thread of its own file system attributes change
// mount namespace) and is never used again: it exits with its goroutine.
// Joining needs CAP_SYS_ADMIN and CAP_SYS_CHROOT.
func InMountNS(ns *os.File, start func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- fmt.Errorf("entering the container's mount namespace: %w", err)
			return
		}
		if err := unix.Setns(int(ns.Fd()), unix.CLONE_NEWNS); err != nil {
			errc <- fmt.Errorf("entering the container's mount namespace: %w", err)
			return
		}
		errc <- start()
	}()
	return <-errc
}
