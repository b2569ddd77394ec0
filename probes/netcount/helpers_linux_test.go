package netcount

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"github.com/podvisor/podvisor/probes/listen"
)

// The test binary doubles as the processes the tests count or kill:
// with childEnv set it runs one of them instead of the tests.
const childEnv = "PODVISOR_NETCOUNT_TEST_CHILD"

func TestMain(m *testing.M) {
	switch os.Getenv(childEnv) {
	case "udp":
		runUDPChild()
		os.Exit(0)
	case "sleeper":
		io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	case "attacher":
		runAttacher(os.Args[len(os.Args)-2], os.Args[len(os.Args)-1] == "legacy")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// prerequisite skips a test whose environment is missing, except in CI
// where that is a failure (the e2e harness's rule).
func prerequisite(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI prerequisite missing: "+format, args...)
	}
	t.Skipf("prerequisite missing (fails in CI): "+format, args...)
}

func requireCounters(t *testing.T) listen.Hierarchy {
	t.Helper()
	if os.Geteuid() != 0 {
		prerequisite(t, "needs root")
	}
	h, err := listen.FindHierarchy()
	if err != nil {
		prerequisite(t, "cgroup2: %v", err)
	}
	if err := DetectFeatures().Usable(); err != nil {
		prerequisite(t, "eBPF network counters: %v", err)
	}
	return h
}

var cgroupSeq atomic.Int64

// testCgroup makes an empty cgroup under the cgroup2 mount, removed when
// the test ends: register it before the processes placed in it.
func testCgroup(t *testing.T, h listen.Hierarchy) (rel, dir string) {
	t.Helper()
	rel = fmt.Sprintf("podvisor-netcount-test-%d-%d", os.Getpid(), cgroupSeq.Add(1))
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

func openCounter(t *testing.T) *Counter {
	t.Helper()
	c, err := Open(Options{MaxPods: 4, Logf: t.Logf})
	if err != nil {
		t.Fatalf("open network counters: %v", err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close network counters: %v", err)
		}
	})
	return c
}

// child starts the test binary as child kind, with args, placed in the
// cgroup rel before it makes any socket (it waits for a first line on
// stdin), and killed at the end of the test.
func child(t *testing.T, h listen.Hierarchy, rel, kind string, args ...string) (*exec.Cmd, io.WriteCloser, *bufio.Scanner) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^$"}, args...)...)
	cmd.Env = append(os.Environ(), childEnv+"="+kind)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
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
		t.Fatalf("start %s child: %v", kind, err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	if rel != "" {
		if _, err := h.Place(rel, cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	return cmd, in, bufio.NewScanner(out)
}

const (
	udpDatagrams = 50
	udpPayload   = 1000 // per datagram, sent by the child
	udpReply     = 300  // per datagram, sent back to it
)

// runUDPChild reads the peer's address, sends it udpDatagrams datagrams
// of udpPayload bytes, reads as many replies, and says "done".
func runUDPChild() {
	sc := bufio.NewScanner(os.Stdin)
	if !sc.Scan() {
		return
	}
	conn, err := net.Dial("udp4", strings.TrimSpace(sc.Text()))
	if err != nil {
		fmt.Println("error", err)
		return
	}
	buf := make([]byte, 2*udpPayload)
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for range udpDatagrams {
		if _, err := conn.Write(buf[:udpPayload]); err != nil {
			fmt.Println("error", err)
			return
		}
		if _, err := conn.Read(buf); err != nil {
			fmt.Println("error", err)
			return
		}
	}
	fmt.Println("done")
}

// runAttacher counts dir, says so, and waits to be killed.
func runAttacher(dir string, legacy bool) {
	c, err := Open(Options{MaxPods: 2})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	c.legacy = legacy
	if _, err := c.Watch(dir); err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("attached")
	io.Copy(io.Discard, os.Stdin)
}

func attached(t *testing.T, dir string, attach ebpf.AttachType) []link.AttachedProgram {
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

// attachedOurs counts the counting programs attached to dir, both hooks.
func attachedOurs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, a := range []ebpf.AttachType{ebpf.AttachCGroupInetIngress, ebpf.AttachCGroupInetEgress} {
		for _, ap := range attached(t, dir, a) {
			p, err := ebpf.NewProgramFromID(ap.ID)
			if err != nil {
				continue
			}
			if info, err := p.Info(); err == nil && (info.Name == progIngressName || info.Name == progEgressName) {
				n++
			}
			p.Close()
		}
	}
	return n
}

// waitKernelObjects waits up to 10 s for the kernel to hold exactly progs
// programs and maps maps named like the counter's that no other process
// holds (daemons of the e2e tests may count at the same time); it frees
// a dead process's objects after an RCU grace period, not at once.
func waitKernelObjects(t *testing.T, progs, maps int) {
	t.Helper()
	var p, m int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if p, m = kernelObjects(); p == progs && m == maps {
			return
		}
	}
	t.Fatalf("waited 10 s for %d programs and %d maps named like the counter's in the kernel; there are %d and %d", progs, maps, p, m)
}

func kernelObjects() (progs, maps int) {
	foreignProgs, foreignMaps := heldByOthers()
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			break
		}
		id = next
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			if info, err := p.Info(); err == nil && (info.Name == progIngressName || info.Name == progEgressName) {
				if !foreignProgs[uint32(id)] {
					progs++
				} else if ids, ok := info.MapIDs(); ok {
					for _, m := range ids { // its map is another process's too
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
			if info, err := m.Info(); err == nil && info.Name == mapName && !foreignMaps[uint32(id)] {
				maps++
			}
			m.Close()
		}
	}
	return progs, maps
}

// heldByOthers are the programs and maps other processes hold an fd of
// (a link's fdinfo names its program), from /proc/*/fdinfo.
func heldByOthers() (progs, maps map[uint32]bool) {
	progs, maps = map[uint32]bool{}, map[uint32]bool{}
	self := strconv.Itoa(os.Getpid())
	procs, _ := os.ReadDir("/proc")
	for _, p := range procs {
		if p.Name() == self || p.Name()[0] < '0' || p.Name()[0] > '9' {
			continue
		}
		fds, _ := os.ReadDir("/proc/" + p.Name() + "/fdinfo")
		for _, fd := range fds {
			b, err := os.ReadFile("/proc/" + p.Name() + "/fdinfo/" + fd.Name())
			if err != nil {
				continue
			}
			for _, line := range strings.Split(string(b), "\n") {
				k, v, ok := strings.Cut(line, ":")
				if !ok || (k != "prog_id" && k != "map_id") {
					continue
				}
				if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32); err == nil {
					if k == "prog_id" {
						progs[uint32(n)] = true
					} else {
						maps[uint32(n)] = true
					}
				}
			}
		}
	}
	return progs, maps
}
