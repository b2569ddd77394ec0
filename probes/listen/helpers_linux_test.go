package listen

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/bpftest"
	"github.com/podvisor/podvisor/test/prereq"
)

// The test binary doubles as the processes the tests watch: with
// childEnv set it runs one of them instead of the tests.
const childEnv = "PODVISOR_LISTEN_TEST_CHILD"

func TestMain(m *testing.M) {
	bpftest.Main(m, childEnv, map[string]func(){
		"server":   func() { runServer(os.Stdin, os.Stdout) },
		"opener":   runOpener,
		"attacher": func() { bpftest.RunAttacher(attachWatcher) },
	})
}

// runOpener opens a watcher, logging to stdout, and says which path it
// chose.
func runOpener() {
	w, err := Open(Options{Logf: func(f string, a ...any) { fmt.Printf("log "+f+"\n", a...) }})
	if err != nil {
		fmt.Println("error", err)
		return
	}
	fmt.Println("path", w.Path())
}

// prerequisite skips a test whose environment lacks something, and fails it in CI.
var prerequisite = prereq.Missing

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		prerequisite(t, "needs root")
	}
}

func requireHierarchy(t *testing.T) Hierarchy {
	t.Helper()
	requireRoot(t)
	h, err := FindHierarchy()
	if err != nil {
		prerequisite(t, "cgroup2: %v", err)
	}
	return h
}

func requireEBPF(t *testing.T) Features {
	t.Helper()
	requireHierarchy(t)
	f := DetectFeatures()
	if err := f.EBPFUsable(); err != nil {
		prerequisite(t, "eBPF listen watcher: %v", err)
	}
	return f
}

// testCgroup makes an empty cgroup under the cgroup2 mount, removed
// (with anything below it) when the test ends: register it before the
// processes placed in it, so they are gone first.
func testCgroup(t *testing.T, h Hierarchy) (rel, dir string) {
	t.Helper()
	return bpftest.Cgroup(t, h, "podvisor-listen-test")
}

// server is a child process that listens and closes on command.
type server struct {
	t   *testing.T
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startServer starts a server, in a network namespace of its own if
// newNetNS, and places it in the cgroup rel before it makes any socket.
func startServer(t *testing.T, h Hierarchy, rel string, newNetNS bool) *server {
	t.Helper()
	cmd, in, out := bpftest.StartChild(t, childEnv+"=server", newNetNS)
	if _, err := h.Place(rel, cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	return &server{t: t, cmd: cmd, in: in, out: out}
}

// do sends a command and returns the port and the CLOCK_MONOTONIC time
// (ns) the server took just before the listen(2) or close(2).
func (s *server) do(format string, args ...any) (port uint16, at int64) {
	s.t.Helper()
	fmt.Fprintf(s.in, format+"\n", args...)
	if !s.out.Scan() {
		s.t.Fatalf("server gave no answer to %q: %v", fmt.Sprintf(format, args...), s.out.Err())
	}
	f := strings.Fields(s.out.Text())
	if len(f) != 3 || f[0] != "ok" {
		s.t.Fatalf("server answered %q to %q", s.out.Text(), fmt.Sprintf(format, args...))
	}
	p, _ := strconv.ParseUint(f[1], 10, 16)
	at, _ = strconv.ParseInt(f[2], 10, 64)
	return uint16(p), at
}

// listen listens on network ("tcp", "tcp4") and address, as listener i.
func (s *server) listen(network, addr string) (uint16, int64) {
	return s.do("listen %s %s", network, addr)
}

// close closes listener i.
func (s *server) close(i int) int64 {
	_, at := s.do("close %d", i)
	return at
}

func monotonic() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func runServer(in io.Reader, out io.Writer) {
	var ls []net.Listener
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) == 3 && f[0] == "listen":
			at := monotonic()
			l, err := net.Listen(f[1], f[2])
			if err != nil {
				fmt.Fprintf(out, "error %v\n", err)
				continue
			}
			ls = append(ls, l)
			fmt.Fprintf(out, "ok %d %d\n", l.Addr().(*net.TCPAddr).Port, at)
		case len(f) == 2 && f[0] == "close":
			i, err := strconv.Atoi(f[1])
			if err != nil || i < 0 || i >= len(ls) {
				fmt.Fprintf(out, "error no listener %q\n", f[1])
				continue
			}
			at := monotonic()
			ls[i].Close()
			fmt.Fprintf(out, "ok 0 %d\n", at)
		default:
			fmt.Fprintf(out, "error unknown command %q\n", sc.Text())
		}
	}
}

// attachWatcher watches dir with the eBPF watcher, in an attacher child.
func attachWatcher(dir string, legacy bool) error {
	w, err := newSockOpsWatcher(DetectFeatures(), 4, nil)
	if err != nil {
		return err
	}
	w.legacy = legacy
	_, err = w.Watch(dir)
	return err
}

// next returns the next event, failing the test if none comes in 10 s.
func next(t *testing.T, w Watcher, waitingFor string) Event {
	t.Helper()
	select {
	case e, ok := <-w.Events():
		if !ok {
			t.Fatalf("events closed while waiting for %s", waitingFor)
		}
		return e
	case <-time.After(10 * time.Second):
		t.Fatalf("no event in 10 s while waiting for %s", waitingFor)
	}
	return Event{}
}

// none fails if an event is waiting.
func none(t *testing.T, w Watcher, why string) {
	t.Helper()
	select {
	case e := <-w.Events():
		t.Fatalf("unexpected event %v (%s)", e, why)
	default:
	}
}
