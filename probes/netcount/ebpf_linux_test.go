package netcount

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/bpftest"
)

// A process in the counted cgroup sends N bytes over loopback UDP and
// receives M: the counters grow by at least N and M (plus no more than
// the IP and UDP headers and a little background), packets by the
// datagram count.
func TestCountsUDPTrafficOfTheCgroup(t *testing.T) {
	h := requireCounters(t)
	rel, dir := testCgroup(t, h)
	c := openCounter(t)
	id, err := c.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Read(id); err != nil || got != (Counters{}) {
		t.Fatalf("fresh counters: %+v, %v; want zero", got, err)
	}
	peer := exchangeUDP(t, h, rel)
	got, err := c.Read(id)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("counted %+v", got)
	const headers = 20 + 8 // IPv4 and UDP
	check := func(what string, v, lo, hi uint64) {
		if v < lo || v > hi {
			t.Errorf("%s = %d, want within [%d, %d]", what, v, lo, hi)
		}
	}
	check("txBytes", got.TxBytes, udpDatagrams*udpPayload, udpDatagrams*(udpPayload+headers)+4096)
	check("rxBytes", got.RxBytes, udpDatagrams*udpReply, udpDatagrams*(udpReply+headers)+4096)
	check("txPackets", got.TxPackets, udpDatagrams, udpDatagrams+10)
	check("rxPackets", got.RxPackets, udpDatagrams, udpDatagrams+10)

	// The test process's own traffic, outside the cgroup, is not counted.
	other, err := net.DialUDP("udp4", nil, peer)
	if err != nil {
		t.Fatal(err)
	}
	other.Write(make([]byte, 5000))
	other.Close()
	if again, _ := c.Read(id); again.TxBytes != got.TxBytes {
		t.Errorf("traffic from outside the cgroup was counted: %+v then %+v", got, again)
	}

	// Unwatch frees the slot and detaches; the next Watch starts from zero.
	if err := c.Unwatch(id); err != nil {
		t.Fatal(err)
	}
	if n := attachedOurs(t, dir); n != 0 {
		t.Fatalf("%d counting programs attached after Unwatch", n)
	}
	if _, err := c.Read(id); err == nil {
		t.Fatal("Read of an unwatched cgroup succeeded")
	}
	if id, err = c.Watch(dir); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.Read(id); got != (Counters{}) {
		t.Fatalf("a reused slot starts at %+v, want zero", got)
	}
}

// Another program attached to the cgroup keeps its place: counting is one
// of many, and never drops a packet.
func TestOtherProgramsKeepWorking(t *testing.T) {
	h := requireCounters(t)
	_, dir := testCgroup(t, h)
	allow, err := ebpf.NewProgram(&ebpf.ProgramSpec{Name: "test_other", Type: ebpf.CGroupSKB,
		AttachType: ebpf.AttachCGroupInetEgress, License: "MIT",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 1), asm.Return()}})
	if err != nil {
		t.Fatal(err)
	}
	defer allow.Close()
	l, err := link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: ebpf.AttachCGroupInetEgress, Program: allow})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	c := openCounter(t)
	id, err := c.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(bpftest.Attached(t, dir, ebpf.AttachCGroupInetEgress)); n != 2 {
		t.Fatalf("%d egress programs attached, want 2 (the other and ours)", n)
	}
	if err := c.Unwatch(id); err != nil {
		t.Fatal(err)
	}
	if n := len(bpftest.Attached(t, dir, ebpf.AttachCGroupInetEgress)); n != 1 {
		t.Fatalf("%d egress programs attached after Unwatch, want the other one only", n)
	}
}

// kill -9 of a daemon that counted leaves nothing attached twice: a
// bpf_link goes with its process; a legacy attachment (kernels before
// 5.7) stays, and the next Watch detaches it before attaching its own.
func TestKilledCounterLeavesNothingAttachedTwice(t *testing.T) {
	for _, mode := range []string{"link", "legacy"} {
		t.Run(mode, func(t *testing.T) {
			h := requireCounters(t)
			_, dir := testCgroup(t, h)
			after := map[string]int{"link": 0, "legacy": 2}[mode] // ingress and egress
			for round := range 20 {                               // the 20 restarts
				cmd, in, out := child(t, h, "", "attacher", dir, mode)
				if !out.Scan() || out.Text() != "attached" {
					t.Fatalf("round %d: attacher said %q", round, out.Text())
				}
				if n := attachedOurs(t, dir); n != 2 {
					t.Fatalf("round %d: %d counting programs attached while the attacher runs, want 2", round, n)
				}
				cmd.Process.Signal(syscall.SIGKILL)
				cmd.Wait()
				in.Close()
				if n := attachedOurs(t, dir); n != after {
					t.Fatalf("round %d: %d counting programs attached after kill -9, want %d", round, n, after)
				}
			}
			// Nothing else is left in the kernel: the killed processes'
			// programs and maps are gone, but for the last legacy
			// attachment's (its two programs and the map they hold).
			waitKernelObjects(t, after, after/2)
			c := openCounter(t)
			id, err := c.Watch(dir)
			if err != nil {
				t.Fatal(err)
			}
			if n := attachedOurs(t, dir); n != 2 {
				t.Fatalf("%d counting programs attached after a restarted Watch, want 2", n)
			}
			waitKernelObjects(t, 2, 1) // this counter's own; the leftover's freed
			if err := c.Unwatch(id); err != nil {
				t.Fatal(err)
			}
			if n := attachedOurs(t, dir); n != 0 {
				t.Fatalf("%d counting programs attached after Unwatch, want 0", n)
			}
		})
	}
}

// The cost of counting: the kernel's own run-time statistics of the two
// programs, per packet. Logged for docs/internals.md; bounded loosely so
// that a program grown by mistake (a loop, a helper per packet) fails.
func TestCostPerPacket(t *testing.T) {
	h := requireCounters(t)
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		prerequisite(t, "kernel bpf run-time statistics (5.8+): %v", err)
	}
	defer stats.Close()
	rel, dir := testCgroup(t, h)
	c := openCounter(t)
	id, err := c.Watch(dir)
	if err != nil {
		t.Fatal(err)
	}
	exchangeUDP(t, h, rel)
	c.mu.Lock()
	progs := c.byID[id].Programs()
	c.mu.Unlock()
	var runs uint64
	var total time.Duration
	for _, p := range progs {
		s, err := p.Stats()
		if err != nil {
			t.Fatal(err)
		}
		runs, total = runs+s.RunCount, total+s.Runtime
	}
	if runs < 2*udpDatagrams {
		t.Fatalf("%d program runs for %d datagrams each way", runs, udpDatagrams)
	}
	per := total / time.Duration(runs)
	t.Logf("%d runs, %v in all, %v per packet", runs, total, per)
	if per > 20*time.Microsecond {
		t.Errorf("counting costs %v per packet, want well under a microsecond", per)
	}
}

// netnsChild is a process in a network namespace of its own (with only
// loopback), killed at the end of the test.
func netnsChild(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=sleeper")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWNET}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		in.Close()
		cmd.Process.Kill()
		cmd.Wait() // the namespace, and the links in it, go
	})
	pid := fmt.Sprint(cmd.Process.Pid)
	// The child is in its namespace once the kernel shows it.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if ns, _ := os.Readlink("/proc/" + pid + "/ns/net"); ns != "" {
			if self, _ := os.Readlink("/proc/self/ns/net"); ns != self {
				return cmd
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("waited 5 s for the child to be in a network namespace of its own")
		}
	}
}

// A pod whose link to another namespace is not a veth to the host has no
// host side to count by: a macvlan names its parent, the host's NIC (whose
// counters are the whole host's), and a veth to a third namespace names an
// index that, in the host, is some other interface.
func TestHostVethOnlyForAVethToTheHost(t *testing.T) {
	if os.Geteuid() != 0 {
		prerequisite(t, "needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		prerequisite(t, "iproute2's ip: %v", err)
	}
	pod, third := netnsChild(t), netnsChild(t)
	podNS, podPid, thirdPid := fmt.Sprintf("/proc/%d/ns/net", pod.Process.Pid), fmt.Sprint(pod.Process.Pid), fmt.Sprint(third.Process.Pid)
	parent := fmt.Sprintf("pvnd%d", pod.Process.Pid%100000)
	ip := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
		return nil
	}
	// The macvlan's parent, a host NIC here, is one side of a veth pair
	// in the host (a dummy interface needs a module some kernels lack).
	if err := ip("link", "add", parent, "type", "veth", "peer", "name", parent+"p"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ip("link", "del", parent) })
	if err := ip("link", "add", "link", parent, "name", "eth0", "netns", podPid, "type", "macvlan"); err != nil {
		prerequisite(t, "a macvlan: %v", err)
	}
	if v, err := HostVeth(podNS); err == nil {
		t.Fatalf("a pod with a macvlan has host-side veth %q", v)
	}
	// A veth to a third namespace, its peer at an index the host uses.
	if err := ip("link", "add", "eth1", "netns", podPid, "type", "veth", "peer", "name", "eth1", "netns", thirdPid); err != nil {
		t.Fatal(err)
	}
	if v, err := HostVeth(podNS); err == nil {
		t.Fatalf("a pod with a veth to another pod has host-side veth %q", v)
	}
}

// A pod with a network namespace of its own and a veth to the host: the
// host side is found from inside the namespace, and what the host sends
// to the pod is the pod's Rx.
func TestHostVethOfANamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		prerequisite(t, "needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		prerequisite(t, "iproute2's ip: %v", err)
	}
	cmd := netnsChild(t)
	pid := fmt.Sprint(cmd.Process.Pid)
	host := fmt.Sprintf("pvnc%d", cmd.Process.Pid%100000)
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	inPod := []string{"nsenter", "--net=/proc/" + pid + "/ns/net", "ip"}
	if v, err := HostVeth("/proc/" + pid + "/ns/net"); err == nil {
		t.Fatalf("a namespace with loopback only has host-side veth %q", v)
	}
	run("ip", "link", "add", host, "type", "veth", "peer", "name", "eth0", "netns", pid)
	t.Cleanup(func() { exec.Command("ip", "link", "del", host).Run() })
	run("ip", "addr", "add", "169.254.77.1/30", "dev", host)
	run("ip", "link", "set", host, "up")
	run(append(inPod, "addr", "add", "169.254.77.2/30", "dev", "eth0")...)
	run(append(inPod, "link", "set", "eth0", "up")...)

	got, err := HostVeth("/proc/" + pid + "/ns/net")
	if err != nil || got != host {
		t.Fatalf("HostVeth = %q, %v; want %q", got, err, host)
	}
	// Unconnected: the pod's ICMP port unreachable answers would make a
	// connected socket's next write fail.
	conn, err := net.ListenUDP("udp4", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	pod := &net.UDPAddr{IP: net.IPv4(169, 254, 77, 2), Port: 9}
	// The first datagrams wait for ARP, and a few of them may be dropped:
	// count once the pod has answered (the ICMP port unreachable is Tx).
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		conn.WriteToUDP([]byte{0}, pod)
		if c, _ := ReadVeth(host); c.TxPackets > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("waited 5 s for the pod to answer over its veth")
		}
	}
	time.Sleep(50 * time.Millisecond) // the warm-up's answers arrive
	before, err := ReadVeth(host)
	if err != nil {
		t.Fatal(err)
	}
	const sends, size = 20, 1000
	for range sends {
		if _, err := conn.WriteToUDP(make([]byte, size), pod); err != nil {
			t.Fatal(err)
		}
	}
	var after Counters
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if after, err = ReadVeth(host); err != nil {
			t.Fatal(err)
		}
		if after.RxBytes-before.RxBytes >= sends*size || time.Now().After(deadline) {
			break
		}
	}
	if d := after.RxBytes - before.RxBytes; d < sends*size || d > sends*(size+100) {
		t.Fatalf("the pod received %d bytes by its veth's host side, want %d plus headers (before %+v, after %+v)", d, sends*size, before, after)
	}
	if after.RxPackets-before.RxPackets < sends {
		t.Fatalf("the pod received %d packets, want at least %d", after.RxPackets-before.RxPackets, sends)
	}
}
