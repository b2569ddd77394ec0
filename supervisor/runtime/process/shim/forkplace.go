package shim

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// traceForks: a leader that needs an oom_score_adj or cgroup v1 groups is
// forked traced (PTRACE_TRACEME) and given them while stopped at its exec,
// before its first instruction. The shim or keeper never takes the
// container's score or cgroups itself, so it is never charged as, or
// OOM-killed for, the container, and has nothing to move back from.
// Tests turn it off to reach the fallback.
var traceForks = true

// placeStopped gives the child, stopped by the SIGTRAP of its exec, its
// oom_score_adj and cgroup v1 groups, then lets it run untraced. A child
// that cannot be placed is killed and reaped, and its start fails. It
// runs on the thread that forked (the tracer).
func (s *shim) placeStopped(pid int) error {
	var ws unix.WaitStatus
	for {
		_, err := unix.Wait4(pid, &ws, unix.WALL, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			unix.Kill(pid, unix.SIGKILL)
			return fmt.Errorf("waiting for the container to stop at its exec: %w", err)
		}
		break
	}
	if !ws.Stopped() {
		return errors.New("the container ended before it ran") // reaped
	}
	err := s.placeChild(pid)
	if err == nil && ws.StopSignal() != unix.SIGTRAP {
		err = fmt.Errorf("the container stopped at %v before its exec was seen", ws.StopSignal())
	}
	if err == nil {
		err = unix.PtraceDetach(pid)
	}
	if err != nil {
		unix.Kill(pid, unix.SIGKILL)
		for {
			if _, werr := unix.Wait4(pid, &ws, unix.WALL, nil); !errors.Is(werr, unix.EINTR) {
				break
			}
		}
		return err
	}
	return nil
}

// placeChild writes a stopped child's oom_score_adj and cgroup v1 groups.
func (s *shim) placeChild(pid int) error {
	id := strconv.Itoa(pid)
	if v := s.spec.OOMScoreAdj; v != nil {
		// Lowering a score needs CAP_SYS_RESOURCE; without it the
		// container keeps the inherited score (the daemon warns once).
		err := os.WriteFile(filepath.Join("/proc", id, "oom_score_adj"), []byte(strconv.Itoa(*v)), 0)
		if err != nil && !errors.Is(err, os.ErrPermission) {
			return fmt.Errorf("oom_score_adj %d: %w", *v, err)
		}
	}
	for _, procs := range s.spec.Cgroup.Procs {
		if err := os.WriteFile(procs, []byte(id), 0); err != nil {
			return fmt.Errorf("joining cgroup %s: %w", filepath.Dir(procs), err)
		}
	}
	return nil
}
