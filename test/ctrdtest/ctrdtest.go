// Package ctrdtest starts a private containerd for tests: its own socket,
// root and state under a temporary directory, never the system's.
package ctrdtest

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/pod/mountinfo"
	"github.com/podvisor/podvisor/test/prereq"
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
	prereq.Missing(t, "%v (install containerd and runc, run as root)", missing)
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
	return launch(func(string) string { return `disabled_plugins = ["io.containerd.grpc.v1.cri"]` + "\n" })
}

// LaunchCRI runs a private containerd with its CRI plugin, for a kubelet
// to use as its runtime (the bench's kubelet peer). cri returns the
// plugin's configuration, given containerd's directory.
func LaunchCRI(cri func(dir string) string) (*Containerd, error) {
	return launch(cri)
}

func launch(extra func(dir string) string) (*Containerd, error) {
	// Short paths: unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "ctrd")
	if err != nil {
		return nil, err
	}
	c := &Containerd{Address: filepath.Join(dir, "c.sock"), Dir: dir, config: filepath.Join(dir, "config.toml")}
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
%s[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), extra(dir), c.Address, c.Address+".ttrpc")
	if err := os.WriteFile(c.config, []byte(cfg), 0o644); err != nil {
		return nil, err
	}
	if err := c.start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return c, nil
}

// Close kills every container of this containerd, then containerd and its
// shims, and removes its files: a shim's death does not end its
// containers, and their PID 1s ignore SIGTERM.
func (c *Containerd) Close() {
	KillTasks(c.Address)
	c.Stop()
	KillShims(c.Address)
	// Snapshots are mounted while tasks live; unmount before removal.
	UnmountUnder(c.Dir)
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

// KillTasks SIGKILLs every process the shims of the containerd at address
// run (their containers and whatever those started), while the shims still
// live to hold them as children, and waits up to 5 s for them to be gone.
// It returns the pids still alive then.
func KillTasks(address string) []int {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var left []int
		for _, shim := range shimPids(address) {
			left = append(left, descendants(shim)...)
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		for _, pid := range left {
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// shimPids are the processes with address as an argument: the containerd
// at address's shims (and containerd itself, whose only children are shims).
func shimPids(address string) []int {
	var pids []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		if err != nil || !containsArg(data, address) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(f))); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// descendants lists the live (non-zombie) processes below pid.
func descendants(pid int) []int {
	children := map[int][]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and parentheses.
		fields := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+1:]))
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		child, err1 := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		parent, err2 := strconv.Atoi(fields[1])
		if err1 == nil && err2 == nil {
			children[parent] = append(children[parent], child)
		}
	}
	var out []int
	queue := children[pid]
	for len(queue) > 0 {
		p := queue[0]
		queue = append(queue[1:], children[p]...)
		out = append(out, p)
	}
	return out
}

// UnmountUnder lazily unmounts every mount at or below dir, deepest first.
func UnmountUnder(dir string) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return
	}
	var points []string
	for _, m := range mounts {
		if p := m.Point; p == dir || strings.HasPrefix(p, dir+"/") {
			points = append(points, p)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		syscall.Unmount(p, syscall.MNT_DETACH)
	}
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
