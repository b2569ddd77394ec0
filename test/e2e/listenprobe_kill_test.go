package e2e

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/mountinfo"
	"github.com/podvisor/podvisor/test/bpftest"
)

// The names the listen watcher gives its programs and ring buffer
// (probes/listen; BPF object names are 15 characters at most).
const (
	listenProgName  = "podvisor_listen"
	releaseProgName = "podvisor_close"
)

// The daemon killed with SIGKILL 20 times while its pods listen and close:
// after each start every watched pod's cgroup has its programs attached
// once, the daemon holds as many programs as after the first start, and a
// kill leaves none attached; after the last kill no program or map of
// the watcher is left in the kernel; after the last start probes still
// fire on a close.
func TestListenProbesSurviveKills(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	root := d.cgroupRoot("listen-kills")
	d.withConfig("cgroups: {root: " + root + "}\n")
	d.start()
	if got := nodeListenPath(t, d); got != "ebpf-sockops" {
		prerequisite(t, "listen path is %q, not eBPF", got)
	}
	flapPort := freePort(t)
	d.write("flap.yaml", serverPod(t, "flap", flapServerEnv, fmt.Sprintf("%d 30ms", flapPort),
		fmt.Sprintf("    readinessProbe: {tcpSocket: {port: %d}, periodSeconds: 30}\n", flapPort)))
	port, stamp, closeOn := freePort(t), filepath.Join(d.dir, "listened"), filepath.Join(d.dir, "close")
	d.write("srv.yaml", listenPod(t, "srv", port, port, time.Second, stamp, closeOn))
	d.waitPod("srv", 20*time.Second, podReady)
	d.waitPod("flap", 20*time.Second, running)

	cgroup2 := cgroup2Mount(t)
	watched := func() {
		t.Helper()
		waitFor(t, "the daemon to watch both pods' listeners", func() bool {
			log := d.log.String()
			return strings.Contains(log, `msg="listeners watched" pod=default/srv`) && strings.Contains(log, `msg="listeners watched" pod=default/flap`)
		})
	}
	watched()
	dirs := podCgroup2Dirs(t, filepath.Join(cgroup2, root), 2)
	heldFirst := heldPrograms(t, d.cmd.Process.Pid)
	if heldFirst == 0 {
		t.Fatalf("the daemon holds no %s program", listenProgName)
	}
	for round := 1; round <= 20; round++ {
		for _, dir := range dirs {
			if n := attachedTo(t, dir); n != 1 {
				t.Fatalf("round %d: %d listen programs attached to %s, want 1", round, n, dir)
			}
		}
		if n := heldPrograms(t, d.cmd.Process.Pid); n != heldFirst {
			t.Fatalf("round %d: the daemon holds %d listen programs, %d after its first start", round, n, heldFirst)
		}
		d.stop(syscall.SIGKILL)
		for _, dir := range dirs {
			waitFor(t, "a killed daemon's programs to leave "+dir, func() bool { return attachedTo(t, dir) == 0 })
		}
		if round == 20 {
			waitForLong(t, 20*time.Second, "no listen program or map left in the kernel but other processes'", func() bool {
				progs, maps := listenObjects.Unheld()
				return progs == 0 && maps == 0
			})
		}
		d.start()
		watched()
	}
	d.waitPod("srv", 20*time.Second, func(p *v1.Pod) bool { return podReady(p) && running(p) })
	if err := writeString(closeOn, ""); err != nil {
		t.Fatal(err)
	}
	var unreadyAt time.Time
	d.waitPod("srv", 20*time.Second, func(p *v1.Pod) bool {
		unreadyAt = time.Now()
		return !podReady(p)
	})
	lag := unreadyAt.Sub(readStamp(t, stamp+".closed"))
	t.Logf("after 20 kills: unready %v after close()", lag)
	if run := verdictRun(t, d, "srv", "app", false); run != "listen event" {
		t.Fatalf("after 20 kills: unready by a %s run %v after close(), want the close's listen event (the period is 30 s)", run, lag)
	}
}

func cgroup2Mount(t *testing.T) string {
	t.Helper()
	ms, err := mountinfo.Read()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if m.FSType == "cgroup2" {
			return m.Point
		}
	}
	prerequisite(t, "no cgroup2 mount")
	return ""
}

// podCgroup2Dirs finds the want pod cgroups (pod<uid>) under root.
func podCgroup2Dirs(t *testing.T, root string, want int) []string {
	t.Helper()
	var dirs []string
	filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() && p != root && strings.HasPrefix(e.Name(), "pod") {
			dirs = append(dirs, p)
			return filepath.SkipDir
		}
		return nil
	})
	if len(dirs) != want {
		t.Fatalf("%d pod cgroups under %s, want %d: %v", len(dirs), root, want, dirs)
	}
	return dirs
}

// attachedTo counts the sock_ops programs attached to the cgroup dir
// itself; where sock_release programs are attached, there must be as
// many.
func attachedTo(t *testing.T, dir string) int {
	t.Helper()
	count := func(attach ebpf.AttachType) int { return len(bpftest.Attached(t, dir, attach)) }
	ops := count(ebpf.AttachCGroupSockOps)
	if rel := count(ebpf.AttachCgroupInetSockRelease); rel != 0 && rel != ops {
		t.Fatalf("%s: %d sock_ops but %d sock_release programs attached", dir, ops, rel)
	}
	return ops
}

// progName is the name of the BPF program id, "" if it is gone.
func progName(id uint32) string {
	p, err := ebpf.NewProgramFromID(ebpf.ProgramID(id))
	if err != nil {
		return ""
	}
	defer p.Close()
	info, err := p.Info()
	if err != nil {
		return ""
	}
	return info.Name
}

// heldPrograms counts the distinct listen programs the process holds.
func heldPrograms(t *testing.T, pid int) int {
	t.Helper()
	progs, _ := bpftest.FdinfoIDs(strconv.Itoa(pid))
	seen := map[uint32]bool{}
	for _, id := range progs {
		if name := progName(id); name == listenProgName || name == releaseProgName {
			seen[id] = true
		}
	}
	return len(seen)
}

// listenObjects are the listen watcher's programs and ring buffer.
var listenObjects = bpftest.Objects{Programs: []string{listenProgName, releaseProgName}, Map: listenProgName}
