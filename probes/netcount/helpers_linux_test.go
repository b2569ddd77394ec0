package netcount

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/podvisor/podvisor/probes/listen"
	"github.com/podvisor/podvisor/test/bpftest"
	"github.com/podvisor/podvisor/test/prereq"
)

// The test binary doubles as the processes the tests count or kill:
// with childEnv set it runs one of them instead of the tests.
const childEnv = "PODVISOR_NETCOUNT_TEST_CHILD"

func TestMain(m *testing.M) {
	bpftest.Main(m, childEnv, map[string]func(){
		"udp":      runUDPChild,
		"sleeper":  func() { io.Copy(io.Discard, os.Stdin) },
		"attacher": func() { bpftest.RunAttacher(attachCounter) },
	})
}

// prerequisite skips a test whose environment lacks something, and fails it in CI.
var prerequisite = prereq.Missing

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

// testCgroup makes an empty cgroup under the cgroup2 mount, removed when
// the test ends: register it before the processes placed in it.
func testCgroup(t *testing.T, h listen.Hierarchy) (rel, dir string) {
	t.Helper()
	return bpftest.Cgroup(t, h, "podvisor-netcount-test")
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
	cmd, in, out := bpftest.StartChild(t, childEnv+"="+kind, false, args...)
	if rel != "" {
		if _, err := h.Place(rel, cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	return cmd, in, out
}

const (
	udpDatagrams = 50
	udpPayload   = 1000 // per datagram, sent by the child
	udpReply     = 300  // per datagram, sent back to it
)

// exchangeUDP runs a UDP child in the cgroup rel that sends
// udpDatagrams datagrams of udpPayload bytes to a peer on 127.0.0.1,
// which answers each with udpReply bytes, and waits until it is done. It
// returns the peer's address; the peer closes when the test ends.
func exchangeUDP(t *testing.T, h listen.Hierarchy, rel string) *net.UDPAddr {
	t.Helper()
	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	go func() {
		buf := make([]byte, 2*udpPayload)
		for {
			_, from, err := peer.ReadFromUDP(buf)
			if err != nil {
				return
			}
			peer.WriteToUDP(buf[:udpReply], from)
		}
	}()
	_, in, out := child(t, h, rel, "udp")
	fmt.Fprintln(in, peer.LocalAddr().String())
	if !out.Scan() || out.Text() != "done" {
		t.Fatalf("the UDP child did not finish: %q %v", out.Text(), out.Err())
	}
	return peer.LocalAddr().(*net.UDPAddr)
}

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

// attachCounter counts dir, in an attacher child.
func attachCounter(dir string, legacy bool) error {
	c, err := Open(Options{MaxPods: 2})
	if err != nil {
		return err
	}
	c.legacy = legacy
	_, err = c.Watch(dir)
	return err
}

// attachedOurs counts the counting programs attached to dir, both hooks.
func attachedOurs(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	for _, a := range []ebpf.AttachType{ebpf.AttachCGroupInetIngress, ebpf.AttachCGroupInetEgress} {
		for _, ap := range bpftest.Attached(t, dir, a) {
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

// counterObjects are the counter's programs and map in the kernel.
var counterObjects = bpftest.Objects{Programs: []string{progIngressName, progEgressName}, Map: mapName}

// waitKernelObjects waits up to 10 s for the kernel to hold exactly progs
// programs and maps maps named like the counter's that no other process
// holds (daemons of the e2e tests may count at the same time); it frees
// a dead process's objects after an RCU grace period, not at once.
func waitKernelObjects(t *testing.T, progs, maps int) {
	t.Helper()
	counterObjects.WaitUnheld(t, progs, maps)
}
