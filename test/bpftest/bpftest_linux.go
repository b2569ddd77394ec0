package bpftest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// Hierarchy is the part of a cgroup2 hierarchy (probes/listen.Hierarchy)
// a test cgroup needs.
type Hierarchy interface {
	Dir(rel string) (string, error)
	Remove(rel string) error
}

var cgroupSeq atomic.Int64

// Cgroup makes an empty cgroup named prefix-<pid>-<n> under h, removed
// (with anything below it) when the test ends: make it before the
// processes placed in it, so that they are gone first.
func Cgroup(t testing.TB, h Hierarchy, prefix string) (rel, dir string) {
	t.Helper()
	rel = fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), cgroupSeq.Add(1))
	dir, err := h.Dir(rel)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Remove(rel); err != nil {
			t.Errorf("remove test cgroup: %v", err)
		}
	})
	return rel, dir
}

// Main is the TestMain of a test binary that doubles as the processes its
// tests start (StartChild): with the environment variable env set to the
// name of one of children, it runs that child and exits; otherwise it
// runs the tests.
func Main(m *testing.M, env string, children map[string]func()) {
	if child, ok := children[os.Getenv(env)]; ok {
		child()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// RunAttacher is a child that holds a probe's programs attached to a
// cgroup until it is killed (the kill -9 tests): attach attaches them to
// the directory the child's next-to-last argument names, with the
// attachment of kernels before 5.7 if the last is "legacy". It says
// "attached", or "error" and why, and waits for its stdin to close.
func RunAttacher(attach func(dir string, legacy bool) error) {
	if err := attach(os.Args[len(os.Args)-2], os.Args[len(os.Args)-1] == "legacy"); err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("attached")
	io.Copy(io.Discard, os.Stdin)
}

// StartChild starts the test binary again with env (NAME=kind: its
// TestMain runs the kind of child instead of the tests) and args, in a
// network namespace of its own if newNetNS, killed when the test ends or
// the test binary dies. It returns the child's stdin and a scanner of its
// stdout.
func StartChild(t testing.TB, env string, newNetNS bool, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if newNetNS {
		cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWNET
	}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start child %s: %v", env, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	return cmd, in, bufio.NewScanner(out)
}

// Attached are the programs attached to the cgroup dir itself for attach.
func Attached(t testing.TB, dir string, attach ebpf.AttachType) []link.AttachedProgram {
	t.Helper()
	cg, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	r, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: attach})
	if err != nil {
		t.Fatalf("query %s programs of %s: %v", attach, dir, err)
	}
	return r.Programs
}

// Objects names the kernel objects of one probe: its programs' names and
// its map's.
type Objects struct {
	Programs []string
	Map      string
}

// Unheld counts the programs and maps named like o that no process but
// this one holds: other tests' daemons and watchers run at the same time,
// and their objects are not the caller's. The kernel frees a dead
// process's objects after an RCU grace period, not at once.
func (o Objects) Unheld() (progs, maps int) {
	foreignProgs, foreignMaps := HeldByOthers()
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			if info, err := p.Info(); err == nil && slices.Contains(o.Programs, info.Name) {
				if !foreignProgs[uint32(id)] {
					progs++
				} else if ids, ok := info.MapIDs(); ok {
					for _, m := range ids { // its maps are another process's too
						foreignMaps[uint32(m)] = true
					}
				}
			}
			p.Close()
		}
	}
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if err != nil {
			break
		}
		id = next
		if m, err := ebpf.NewMapFromID(id); err == nil {
			if info, err := m.Info(); err == nil && info.Name == o.Map && !foreignMaps[uint32(id)] {
				maps++
			}
			m.Close()
		}
	}
	return progs, maps
}

// WaitUnheld waits up to 10 s for Unheld to be exactly progs and maps.
func (o Objects) WaitUnheld(t testing.TB, progs, maps int) {
	t.Helper()
	var p, m int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if p, m = o.Unheld(); p == progs && m == maps {
			return
		}
	}
	t.Fatalf("waited 10 s for %d programs named %v and %d maps named %s that no other process holds; there are %d and %d",
		progs, o.Programs, maps, o.Map, p, m)
}

// HeldByOthers are the ids of the programs and maps that processes other
// than this one hold an fd of (a link's fdinfo names its program).
func HeldByOthers() (progs, maps map[uint32]bool) {
	progs, maps = map[uint32]bool{}, map[uint32]bool{}
	self := strconv.Itoa(os.Getpid())
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name() == self || p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		ps, ms := FdinfoIDs(p.Name())
		for _, id := range ps {
			progs[id] = true
		}
		for _, id := range ms {
			maps[id] = true
		}
	}
	return progs, maps
}

// FdinfoIDs are the BPF program and map ids the process pid holds.
func FdinfoIDs(pid string) (progs, maps []uint32) {
	fds, _ := os.ReadDir("/proc/" + pid + "/fdinfo")
	for _, fd := range fds {
		b, err := os.ReadFile("/proc/" + pid + "/fdinfo/" + fd.Name())
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			switch {
			case err != nil:
			case k == "prog_id":
				progs = append(progs, uint32(n))
			case k == "map_id":
				maps = append(maps, uint32(n))
			}
		}
	}
	return progs, maps
}
