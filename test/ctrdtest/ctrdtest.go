// Package ctrdtest starts a private containerd for tests: its own socket,
// root and state under a temporary directory, never the system's.
package ctrdtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Containerd is a running private containerd.
type Containerd struct {
	Address string
	Dir     string
	config  string
	cmd     *exec.Cmd
}

// Require skips the test where containerd or runc is missing or the test
// is not root, except under CI=true, where that is a failure.
func Require(t testing.TB) {
	t.Helper()
	var missing []string
	for _, bin := range []string{"containerd", "runc", "containerd-shim-runc-v2"} {
		if _, err := exec.LookPath(bin); err != nil {
			missing = append(missing, bin)
		}
	}
	if os.Geteuid() != 0 {
		missing = append(missing, "root")
	}
	if len(missing) == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI prerequisite missing: %v (install containerd and runc, run as root)", missing)
	}
	t.Skipf("containerd tests need %v; skipped outside CI", missing)
}

// Start runs a containerd until the test ends.
func Start(t testing.TB) *Containerd {
	t.Helper()
	Require(t)
	c, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// Launch runs a private containerd (for benchmarks; tests use Start).
func Launch() (*Containerd, error) {
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "ctrd")
	if err != nil {
		return nil, err
	}
	c := &Containerd{Address: filepath.Join(dir, "c.sock"), Dir: dir, config: filepath.Join(dir, "config.toml")}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), c.Address, c.Address+".ttrpc")
	if err := os.WriteFile(c.config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if err := c.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// Close stops containerd, kills its containers and removes its files.
func (c *Containerd) Close() {
	c.Stop()
	KillShims(c.Address)
	// Snapshots are mounted while tasks live; unmount before removal.
	exec.Command("sh", "-c", "grep "+c.Dir+" /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r umount -l").Run()
	os.RemoveAll(c.Dir)
}

func (c *Containerd) start() error {
	logf, err := os.OpenFile(filepath.Join(c.Dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	c.cmd = exec.Command("containerd", "--config", c.config)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = c.cmd.Start()
	logf.Close()
	if err != nil {
		return err
	}
	for i := 0; i < 200; i++ {
		if conn, err := net.Dial("unix", c.Address); err == nil {
			conn.Close()
			return nil
		}
		time.Sleep(25 * time.Millisecond)
	}
	return fmt.Errorf("containerd did not come up:\n%s", c.Log())
}

// Stop kills containerd (its shims and containers live on).
func (c *Containerd) Stop() {
	if c.cmd == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.cmd.Process.Kill()
		<-done
	}
	c.cmd = nil
}

// Restart stops and starts containerd again.
func (c *Containerd) Restart() error {
	c.Stop()
	return c.start()
}

// RuncRoot is the runc state directory the test's containers use, apart
// from the host's.
func (c *Containerd) RuncRoot() string { return filepath.Join(c.Dir, "runc") }

// Log returns containerd's log so far.
func (c *Containerd) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "containerd.log"))
	return string(b)
}

// KillShims ends the shims (and with them the containers) of the
// containerd at address, found by their -address argument.
func KillShims(address string) {
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		if err != nil || !containsArg(data, address) {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(filepath.Dir(f)), "%d", &pid)
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

func containsArg(cmdline []byte, arg string) bool {
	start := 0
	for i, b := range cmdline {
		if b == 0 {
			if string(cmdline[start:i]) == arg {
				return true
			}
			start = i + 1
		}
	}
	return false
}
