package sandbox

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// PID is the kind of a pod's shared PID namespace (shareProcessNamespace).
// Unlike the others it cannot be kept by a bind mount alone: a PID
// namespace whose first process has died takes no new processes. So it is
// held by a small init process (podvisor-shim --pod-init), which also reaps the pod's
// orphans, as the kubelet's pause container does.
const PID = "pid"

// initPidFile records the holder's pid (in the host's namespace).
const initPidFile = "pid.init"

// EnsurePID returns the path of the pod's PID namespace, starting its
// init (argv, typically podvisor-shim --pod-init) in a new namespace when
// there is none or its init has died. The init is a session leader of its
// own, so it outlives the daemon; a restarted daemon finds it by its pid
// file and the namespace's inode.
func (s Sandbox) EnsurePID(argv []string) (string, error) {
	path := s.Path(PID)
	if s.initPid() > 0 {
		return path, nil
	}
	if isNsfs(path) {
		// The namespace of an init that died: unusable.
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			return "", fmt.Errorf("unmounting a dead PID namespace: %w", err)
		}
	}
	if len(argv) == 0 {
		return "", errors.New("sandbox: no init command for the pod's PID namespace")
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return "", err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &unix.SysProcAttr{Cloneflags: unix.CLONE_NEWPID, Setsid: true}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting the pod's PID namespace init: %w", err)
	}
	pid := cmd.Process.Pid
	go cmd.Wait() // reaps it should it die while this daemon runs
	fail := func(err error) (string, error) {
		cmd.Process.Kill()
		return "", err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDONLY, 0o444)
	if err != nil {
		return fail(err)
	}
	f.Close()
	if err := unix.Mount(fmt.Sprintf("/proc/%d/ns/pid", pid), path, "", unix.MS_BIND, ""); err != nil {
		return fail(fmt.Errorf("binding the pod's PID namespace: %w", err))
	}
	if err := os.WriteFile(filepath.Join(s.Dir, initPidFile), []byte(strconv.Itoa(pid)+"\n"), 0o600); err != nil {
		return fail(err)
	}
	return path, nil
}

// initPid is the pid of the live init holding the bound PID namespace,
// or 0. The inode comparison guards against a recycled pid.
func (s Sandbox) initPid() int {
	b, err := os.ReadFile(filepath.Join(s.Dir, initPidFile))
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	var bound, live unix.Stat_t
	if unix.Stat(s.Path(PID), &bound) != nil || unix.Stat(fmt.Sprintf("/proc/%d/ns/pid", pid), &live) != nil {
		return 0
	}
	if bound.Ino != live.Ino || bound.Dev != live.Dev {
		return 0
	}
	return pid
}

// stopInit kills the pod's init, and with it whatever is left in the
// namespace (the kernel kills every process of a PID namespace whose
// init dies).
func (s Sandbox) stopInit() error {
	if pid := s.initPid(); pid > 0 {
		if err := unix.Kill(pid, unix.SIGKILL); err != nil && err != unix.ESRCH {
			return fmt.Errorf("stopping the pod's init: %w", err)
		}
	}
	return nil
}
