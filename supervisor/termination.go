package supervisor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime/containerd"
	"github.com/podvisor/podvisor/supervisor/runtime/process"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// withTerminationMessage sets a finished container's message as the
// kubelet does: its termination message file, or under
// FallbackToLogsOnError the tail of its log (process.TerminationMessage).
func (d *Daemon) withTerminationMessage(in *lifecycle.Instance, name, instanceID string, attempt int, st *shim.ExitStatus) {
	if in == nil {
		return
	}
	spec := in.Spec(name)
	if spec == nil {
		return
	}
	file := ""
	if spec.TerminationMessagePath != "" {
		if d.onContainerd(instanceID) {
			file = d.ctrdTerminationFile(instanceID)
		} else {
			file = d.rt.TerminationFile(instanceID)
		}
	}
	st.Message = process.TerminationMessage(spec.TerminationMessagePolicy, file,
		d.logPath(in.Pod, name, attempt), st.ExitCode, st.Reason, st.Message)
}

// ctrdTerminationFile is the host file bound at a containerd container's
// terminationMessagePath.
func (d *Daemon) ctrdTerminationFile(instanceID string) string {
	return filepath.Join(d.cfg.DataDir, "termination", instanceID)
}

// terminationMount makes a containerd container's termination message
// file and binds it at its terminationMessagePath, as the kubelet does: a
// new empty file per container, mode 0666 whatever the umask, so that a
// container running as any user can write it. Its directory is the
// root's alone, so only the container reaches the file.
func (d *Daemon) terminationMount(c *v1.Container, instanceID string) (*containerd.Mount, error) {
	if c.TerminationMessagePath == "" {
		return nil, nil
	}
	path := d.ctrdTerminationFile(instanceID)
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("termination message directory: %w", err)
	}
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o666)
	if err != nil {
		return nil, fmt.Errorf("termination message file %s: %w", path, err)
	}
	err = unix.Fchmod(fd, 0o666)
	unix.Close(fd)
	if err != nil {
		return nil, fmt.Errorf("termination message file %s: %w", path, err)
	}
	return &containerd.Mount{Source: path, Destination: c.TerminationMessagePath, Type: "bind", Options: []string{"rw"}}, nil
}

// removeTerminationFile removes a removed containerd container's file.
func (d *Daemon) removeTerminationFile(instanceID string) {
	if err := os.Remove(d.ctrdTerminationFile(instanceID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		d.log.Warn("removing a termination message file", "instance", instanceID, "err", err)
	}
}
