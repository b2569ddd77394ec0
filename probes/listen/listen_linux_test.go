package listen

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/probes/bpfcgroup"
	"github.com/podvisor/podvisor/test/bpftest"
)

// Every scenario runs on both paths: the eBPF watcher reports on its own;
// the sock_diag watcher reports when asked to rescan (settle). The
// sock_diag path runs twice: with the sockets' cgroup ids, and matching
// sockets by the inodes the cgroup's processes hold, as it must before
// kernel 5.7.
var paths = []Path{PathEBPF, PathSockDiag, pathSockDiagByInode}

const pathSockDiagByInode Path = "sock_diag-by-inode"

func openPath(t *testing.T, p Path) Watcher {
	t.Helper()
	if p == PathEBPF {
		requireEBPF(t)
	}
	open := p
	if p == pathSockDiagByInode {
		open = PathSockDiag
	}
	w, err := Open(Options{Paths: []Path{open}, MaxCgroups: 8, Logf: t.Logf})
	if err != nil {
		prerequisite(t, "listen watcher on %s: %v", p, err)
	}
	if p == pathSockDiagByInode {
		w.(*sockDiagWatcher).byInode = true
		p = PathSockDiag
	}
	if w.Path() != p {
		t.Fatalf("asked for %s, got %s", p, w.Path())
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Errorf("close watcher: %v", err)
		}
	})
	return w
}

// settle makes what happened visible: nothing to do for eBPF, a dump for
// sock_diag.
func settle(t *testing.T, w Watcher, id uint64) {
	t.Helper()
	if w.Path() == PathSockDiag {
		if err := w.Rescan(id); err != nil {
			t.Fatal(err)
		}
	}
}

func forPaths(t *testing.T, scenario func(t *testing.T, p Path)) {
	for _, p := range paths {
		t.Run(string(p), func(t *testing.T) { scenario(t, p) })
	}
}

// A process in the watched cgroup listens: Listening, from the kernel's
// hook on the eBPF path (nothing dumps there: the event is the hook's);
// it closes the listener: Closed. The latencies are logged figures.
func TestListenThenClose(t *testing.T) {
	forPaths(t, func(t *testing.T, p Path) {
		h := requireHierarchy(t)
		rel, dir := testCgroup(t, h)
		w := openPath(t, p)
		id, err := w.Watch(dir)
		if err != nil {
			t.Fatal(err)
		}
		s := startServer(t, h, rel, false)
		none(t, w, "nothing listens yet")

		port, at := s.listen("tcp", ":0")
		settle(t, w, id)
		e := next(t, w, "the listen")
		latency := time.Duration(monotonic() - at)
		t.Logf("listen → event: %v", latency)
		if e.Kind != Listening || e.Cgroup != id || e.Port != port || e.Family != unix.AF_INET6 || e.Socket == 0 {
			t.Fatalf("got %v, want listening cgroup=%d port=%d family=%d", e, id, port, unix.AF_INET6)
		}

		at = s.close(0)
		settle(t, w, id)
		c := next(t, w, "the close")
		t.Logf("close → event: %v", time.Duration(monotonic()-at))
		if c.Kind != Closed || c.Cgroup != id || c.Port != port || c.Socket != e.Socket || c.NetNS != e.NetNS {
			t.Fatalf("got %v, want closed like %v", c, e)
		}
		none(t, w, "after the close")
	})
}

// A listener in a cgroup nobody watches is not reported; one in a cgroup
// below the watched one is, under the watched cgroup's id.
func TestOtherCgroupIsNotReported(t *testing.T) {
	forPaths(t, func(t *testing.T, p Path) {
		h := requireHierarchy(t)
		relA, dirA := testCgroup(t, h)
		relB, _ := testCgroup(t, h)
		w := openPath(t, p)
		id, err := w.Watch(dirA)
		if err != nil {
			t.Fatal(err)
		}
		other := startServer(t, h, relB, false)
		below := startServer(t, h, relA+"/inner", false)

		other.listen("tcp4", ":0")
		port, _ := below.listen("tcp4", ":0")
		settle(t, w, id)
		// The unwatched listen came first: had it been reported, it would be this event.
		e := next(t, w, "the listen below the watched cgroup")
		if e.Kind != Listening || e.Cgroup != id || e.Port != port || e.Family != unix.AF_INET {
			t.Fatalf("got %v, want listening cgroup=%d port=%d family=%d", e, id, port, unix.AF_INET)
		}
		none(t, w, "the other cgroup's listener")
	})
}

// Two listeners on the same port in different network namespaces are two
// listeners, told apart by their namespace.
func TestSamePortInTwoNetNS(t *testing.T) {
	forPaths(t, func(t *testing.T, p Path) {
		h := requireHierarchy(t)
		rel, dir := testCgroup(t, h)
		w := openPath(t, p)
		id, err := w.Watch(dir)
		if err != nil {
			t.Fatal(err)
		}
		host := startServer(t, h, rel, false)
		isolated := startServer(t, h, rel, true)
		port, _ := host.listen("tcp", ":0")
		if p2, _ := isolated.listen("tcp", ":"+strconv.Itoa(int(port))); p2 != port {
			t.Fatalf("isolated server listens on %d, want %d", p2, port)
		}
		settle(t, w, id)
		a, b := next(t, w, "the first listen"), next(t, w, "the second listen")
		for _, e := range []Event{a, b} {
			if e.Kind != Listening || e.Cgroup != id || e.Port != port {
				t.Fatalf("got %v, want listening cgroup=%d port=%d", e, id, port)
			}
		}
		if a.NetNS == 0 || b.NetNS == 0 || a.NetNS == b.NetNS || a.Socket == b.Socket {
			t.Fatalf("the two listeners are not told apart: %v and %v", a, b)
		}
		// Closing one leaves the other.
		host.close(0)
		settle(t, w, id)
		c := next(t, w, "the host listener's close")
		if c.Kind != Closed || (c.Socket != a.Socket && c.Socket != b.Socket) || c.NetNS == isolated1(a, b, c).NetNS {
			t.Fatalf("got %v after closing the host listener", c)
		}
		none(t, w, "the isolated listener still listens")
	})
}

// isolated1 is the one of a and b that c did not close.
func isolated1(a, b, c Event) Event {
	if c.Socket == a.Socket {
		return b
	}
	return a
}

// Listeners open before Watch are reported by Watch.
func TestListenerOpenBeforeWatch(t *testing.T) {
	forPaths(t, func(t *testing.T, p Path) {
		h := requireHierarchy(t)
		rel, dir := testCgroup(t, h)
		s := startServer(t, h, rel, false)
		port, _ := s.listen("tcp4", "127.0.0.1:0")
		w := openPath(t, p)
		id, err := w.Watch(dir)
		if err != nil {
			t.Fatal(err)
		}
		e := next(t, w, "the listener open before Watch")
		if e.Kind != Listening || e.Cgroup != id || e.Port != port {
			t.Fatalf("got %v, want listening cgroup=%d port=%d", e, id, port)
		}
		// The eBPF watcher still sees its close, although it missed the listen.
		s.close(0)
		settle(t, w, id)
		if c := next(t, w, "the close"); c.Kind != Closed || c.Socket != e.Socket {
			t.Fatalf("got %v, want the close of %v", c, e)
		}
	})
}

// Without the ring buffer (kernels before 5.8) the perf buffer carries the
// same events.
func TestPerfBufferFallback(t *testing.T) {
	f := requireEBPF(t)
	if !f.PerfOutput {
		prerequisite(t, "bpf_perf_event_output from sock_ops unavailable")
	}
	h := requireHierarchy(t)
	rel, dir := testCgroup(t, h)
	f.RingBuf = false
	w, err := newSockOpsWatcher(f, 4, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	id, err := w.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	s := startServer(t, h, rel, false)
	port, _ := s.listen("tcp", ":0")
	if e := next(t, w, "the listen"); e.Kind != Listening || e.Cgroup != id || e.Port != port {
		t.Fatalf("got %v, want listening cgroup=%d port=%d", e, id, port)
	}
	s.close(0)
	if e := next(t, w, "the close"); e.Kind != Closed || e.Port != port {
		t.Fatalf("got %v, want closed port=%d", e, port)
	}
}

// kill -9 of a process that attached, 20 times, leaves nothing attached
// twice and nothing leaked in the kernel: a bpf_link goes with its
// process; a legacy attachment (kernels before 5.7) stays, and the next
// Watch detaches it before attaching its own.
func TestKilledAttacherLeavesNothingAttachedTwice(t *testing.T) {
	for _, mode := range []string{"link", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			requireEBPF(t)
			h := requireHierarchy(t)
			rel, dir := testCgroup(t, h)
			want := map[string]int{"link": 0, "legacy": 1}[mode]
			for round := range 20 { // the 20 restarts
				killAttacher(t, dir, mode)
				left := countAttached(t, dir)
				if left != want {
					t.Fatalf("round %d: %d programs attached after kill -9, want %d", round, left, want)
				}
			}
			// Nothing else is left in the kernel: the killed processes'
			// programs and ring buffers are gone, but for the last legacy
			// attachment's (its sock_ops and sock_release programs, and the
			// ring buffer they hold).
			perSet := 1
			if DetectFeatures().SockRelease {
				perSet = 2
			}
			waitKernelObjects(t, want*perSet, want)
			w := openPath(t, PathEBPF)
			id, err := w.Watch(dir)
			if err != nil {
				t.Fatal(err)
			}
			if n := countAttached(t, dir); n != 1 {
				t.Fatalf("%d programs attached after Watch, want 1", n)
			}
			waitKernelObjects(t, perSet, 1) // this watcher's own, the leftover's freed
			s := startServer(t, h, rel, false)
			port, _ := s.listen("tcp", ":0")
			if e := next(t, w, "the listen after the restarts"); e.Kind != Listening || e.Cgroup != id || e.Port != port {
				t.Fatalf("got %v, want listening cgroup=%d port=%d", e, id, port)
			}
			if err := w.Unwatch(id); err != nil {
				t.Fatal(err)
			}
			if n := countAttached(t, dir); n != 0 {
				t.Fatalf("%d programs attached after Unwatch, want 0", n)
			}
		})
	}
}

// watcherObjects are the watcher's programs and ring buffer in the kernel.
var watcherObjects = bpftest.Objects{Programs: []string{progName, progReleaseName}, Map: progName}

// waitKernelObjects waits up to 10 s for the kernel to hold exactly
// progs programs and maps maps named like the watcher's that no other
// process holds: daemons of other test packages running at the same time
// open watchers too (the kernel frees a dead process's objects after an
// RCU grace period, not at once).
func waitKernelObjects(t *testing.T, progs, maps int) {
	t.Helper()
	watcherObjects.WaitUnheld(t, progs, maps)
}

// killAttacher starts a process that watches dir (with bpf_link or the
// legacy attachment), waits until it has attached, and kills it with
// SIGKILL.
func killAttacher(t *testing.T, dir, mode string) {
	t.Helper()
	cmd, _, out := bpftest.StartChild(t, childEnv+"=attacher", false, dir, mode)
	if !out.Scan() || out.Text() != "attached" {
		t.Fatalf("attacher did not attach: %q %v", out.Text(), out.Err())
	}
	if n := countAttached(t, dir); n != 1 {
		t.Errorf("%d programs attached while the attacher runs, want 1", n)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
}

// countAttached counts the programs attached to dir: sock_ops, and
// sock_release where the watcher uses it. A watched cgroup has one set.
func countAttached(t *testing.T, dir string) int {
	t.Helper()
	progs, err := bpfcgroup.AttachedPrograms(dir, ebpf.AttachCGroupSockOps)
	if err != nil {
		t.Fatal(err)
	}
	if DetectFeatures().SockRelease {
		release, err := bpfcgroup.AttachedPrograms(dir, ebpf.AttachCgroupInetSockRelease)
		if err != nil {
			t.Fatal(err)
		}
		if len(release) != len(progs) {
			t.Fatalf("%d sock_ops programs but %d sock_release programs attached to %s", len(progs), len(release), dir)
		}
	}
	return len(progs)
}

// 100 listens and closes in a row each bring their event. The event
// latency is reported as p50/p90, not asserted (the target for listen →
// Ready is p50 < 10 ms, which test/bench's listen rows measure; this is
// the watcher's share).
func TestListenLatency(t *testing.T) {
	requireEBPF(t)
	h := requireHierarchy(t)
	rel, dir := testCgroup(t, h)
	w := openPath(t, PathEBPF)
	if _, err := w.Watch(dir); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, h, rel, false)
	var lat []time.Duration
	for i := range 100 {
		_, at := s.listen("tcp4", "127.0.0.1:0")
		next(t, w, "a listen")
		lat = append(lat, time.Duration(monotonic()-at))
		s.close(i)
		next(t, w, "a close")
	}
	slices.Sort(lat)
	p50, p90 := lat[49], lat[89]
	t.Logf("listen() → event over 100 listens: p50 %v, p90 %v, max %v", p50, p90, lat[99])
}

// eBPF refused → sock_diag, with the path saying so; nothing to try →
// an error, on which the caller keeps periodic probes.
func TestOpenFallsBack(t *testing.T) {
	requireRoot(t)
	var logged []string
	w, err := Open(Options{
		detect: func() Features { return Features{Inconclusive: []string{"sock_ops programs: operation not permitted"}} },
		Logf:   func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) },
	})
	if err != nil {
		prerequisite(t, "sock_diag: %v", err)
	}
	defer w.Close()
	if w.Path() != PathSockDiag {
		t.Fatalf("path %s with eBPF refused, want %s", w.Path(), PathSockDiag)
	}
	if len(logged) != 2 || !strings.Contains(logged[0], "inconclusive eBPF feature probes") ||
		!strings.Contains(logged[1], "using sock_diag: ebpf-sockops unavailable") {
		t.Fatalf("want the inconclusive probes and the fallback logged once each, got %q", logged)
	}
	if _, err := Open(Options{Paths: []Path{}}); err == nil {
		t.Fatal("no path to try and no error")
	}
	if _, err := Open(Options{Paths: []Path{"bogus"}}); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("unknown path: %v", err)
	}
}

// Without privileges the eBPF feature probes answer EPERM: that is
// neither yes nor no, so it is logged as inconclusive, and Open takes
// sock_diag.
func TestOpenUnprivileged(t *testing.T) {
	requireRoot(t)
	// The test binary sits in a directory only root may enter.
	dir, err := os.MkdirTemp("", "podvisor-listen-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	exe := dir + "/listen.test"
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=opener")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged Open: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "path "+string(PathSockDiag)) {
		t.Fatalf("unprivileged Open did not take sock_diag:\n%s", out)
	}
	if !strings.Contains(string(out), "log listen watcher: inconclusive eBPF feature probes") {
		t.Fatalf("the refused probes were not logged as inconclusive:\n%s", out)
	}
	t.Logf("unprivileged:\n%s", out)
}

// Watch refuses what is not a cgroup directory it can use.
func TestWatchRefusesMissingCgroup(t *testing.T) {
	forPaths(t, func(t *testing.T, p Path) {
		requireHierarchy(t)
		w := openPath(t, p)
		if _, err := w.Watch("/nonexistent/podvisor-cgroup"); err == nil {
			t.Fatal("watching a missing cgroup succeeded")
		}
		if err := w.Unwatch(12345); err == nil {
			t.Fatal("unwatching an unknown cgroup succeeded")
		}
		if err := w.Rescan(12345); err == nil {
			t.Fatal("rescanning an unknown cgroup succeeded")
		}
	})
}

// Watch refuses more cgroups than MaxCgroups; watching one again is no
// new cgroup.
func TestWatchIsBounded(t *testing.T) {
	forPaths(t, func(t *testing.T, p Path) {
		h := requireHierarchy(t)
		w := openPath(t, p) // MaxCgroups 8
		var dirs []string
		for range 9 {
			_, dir := testCgroup(t, h)
			dirs = append(dirs, dir)
		}
		for _, dir := range dirs[:8] {
			if _, err := w.Watch(dir); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := w.Watch(dirs[0]); err != nil {
			t.Fatalf("watching a watched cgroup again: %v", err)
		}
		if _, err := w.Watch(dirs[8]); err == nil || !strings.Contains(err.Error(), "most allowed") {
			t.Fatalf("a ninth cgroup: %v", err)
		}
		id, _ := CgroupID(dirs[0])
		if err := w.Unwatch(id); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Watch(dirs[8]); err != nil {
			t.Fatalf("after an Unwatch: %v", err)
		}
	})
}

// Place puts a process in a cgroup below the cgroup2 mount, making the
// parents; Remove takes the whole subtree away once it is empty.
func TestPlaceAndRemove(t *testing.T) {
	h := requireHierarchy(t)
	rel, _ := testCgroup(t, h)
	s := startServer(t, h, rel+"/pod1/c1", false)
	b, err := os.ReadFile("/proc/" + strconv.Itoa(s.cmd.Process.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if want := "0::/" + rel + "/pod1/c1\n"; !strings.Contains(string(b), want) {
		t.Fatalf("/proc/<pid>/cgroup does not have %q:\n%s", want, b)
	}
	if err := h.Remove(rel + "/pod1"); err == nil {
		t.Fatal("removed a cgroup with a process in it")
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	if err := h.Remove(rel + "/pod1"); err != nil {
		t.Fatal(err)
	}
	if dir, _ := h.Dir(rel + "/pod1"); dirExists(dir) {
		t.Fatalf("%s still exists", dir)
	}
	if err := h.Remove(rel + "/pod1"); err != nil {
		t.Fatalf("removing a removed cgroup: %v", err)
	}
	if _, err := h.Place("../escape", os.Getpid()); err == nil {
		t.Fatal("placed a process outside the hierarchy")
	}
}

func dirExists(dir string) bool {
	st, err := os.Stat(dir)
	return err == nil && st.IsDir()
}
