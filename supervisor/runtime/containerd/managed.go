package containerd

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
)

// Managed is a containerd podvisor runs itself, as k3s does,
// on devices where none runs: its own socket, root and state.
type Managed struct {
	Binary string // containerd
	Root   string // persistent: images and snapshots
	State  string // under /run: tasks
	Log    string
}

// managedContainerd starts podvisor's own containerd unless one already
// answers on the address (it outlives a daemon restart, like the
// containers do), and restarts it whenever it dies.
func (r *Runtime) managedContainerd(stop <-chan struct{}) error {
	m, addr := *r.cfg.Managed, r.cfg.Address
	dir := filepath.Dir(m.Log)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	config := filepath.Join(dir, "config.toml")
	text := fmt.Sprintf(`version = 2
root = %q
state = %q
# podvisor talks to containerd's own API; the CRI plugin is not needed.
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, m.Root, m.State, addr, addr+".ttrpc")
	if err := os.WriteFile(config, []byte(text), 0o600); err != nil {
		return err
	}
	pidFile := filepath.Join(dir, "containerd.pid")
	go func() {
		for delay := time.Second; ; delay = min(delay*2, time.Minute) {
			fd, err := r.runningContainerd(pidFile, addr)
			if err != nil {
				if fd, err = r.launchContainerd(m, config, pidFile, addr); err != nil {
					r.log.Error("starting podvisor's containerd", "err", err, "retry in", delay)
					select {
					case <-stop:
						return
					case <-time.After(delay):
					}
					continue
				}
			}
			delay = time.Second
			exited := make(chan struct{})
			go func() { pidfd.Wait(fd); close(exited) }()
			select {
			case <-stop:
				return // it keeps running, as the pods do
			case <-exited:
				r.log.Error("podvisor's containerd exited; restarting it")
			}
		}
	}()
	return nil
}

// runningContainerd finds the containerd a previous daemon started, by
// its recorded pid and start time, if it still answers.
func (r *Runtime) runningContainerd(pidFile, addr string) (int, error) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return -1, err
	}
	var pid int
	var start uint64
	if _, err := fmt.Sscan(strings.TrimSpace(string(data)), &pid, &start); err != nil {
		return -1, err
	}
	fd, err := pidfd.Open(pid, start)
	if err != nil {
		return -1, err
	}
	if conn, err := net.Dial("unix", addr); err == nil {
		conn.Close()
		r.log.Info("using podvisor's running containerd", "pid", pid, "address", addr)
		return fd, nil
	}
	syscall.Close(fd)
	return -1, fmt.Errorf("containerd %d does not answer on %s", pid, addr)
}

func (r *Runtime) launchContainerd(m Managed, config, pidFile, addr string) (int, error) {
	logf, err := os.OpenFile(m.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return -1, err
	}
	defer logf.Close()
	cmd := exec.Command(m.Binary, "--config", config)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own session: it outlives the daemon, and the daemon's signals.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return -1, err
	}
	pid := cmd.Process.Pid
	start, _ := pidfd.StartTime(pid)
	fd, err := pidfd.Open(pid, start)
	go cmd.Wait() // reaped by us while we live; adopted by init otherwise
	if err != nil {
		return -1, err
	}
	os.WriteFile(pidFile, []byte(strconv.Itoa(pid)+" "+strconv.FormatUint(start, 10)+"\n"), 0o600)
	for i := 0; i < 400; i++ {
		if conn, err := net.Dial("unix", addr); err == nil {
			conn.Close()
			r.log.Info("started podvisor's containerd", "pid", pid, "address", addr, "root", m.Root)
			return fd, nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	syscall.Close(fd)
	return -1, fmt.Errorf("containerd did not answer on %s within 10s (log: %s)", addr, m.Log)
}
