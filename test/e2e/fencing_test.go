package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// pidOf reads the pid a test pod wrote to dir/name.pid (0: none yet).
func pidOf(dir, name string) int {
	b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// pidPodSpec is a process pod's spec that writes its pid to
// dir/<pod name>.pid, then sleeps as that pid.
func pidPodSpec(dir string, grace int) string {
	return fmt.Sprintf(`runtimeClassName: process
terminationGracePeriodSeconds: %d
containers:
- name: main
  image: host
  command: ["sh", "-c", "echo $$$$ > %s/$(POD_NAME).pid; exec sleep 1004"]
  env:
  - name: POD_NAME
    valueFrom: {fieldRef: {fieldPath: metadata.name}}`, grace, dir)
}

// tcpCut is a TCP relay between a device and the broker that a test can
// cut (every connection closed, new ones refused) and restore: a link
// failure of one device only.
type tcpCut struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	l      net.Listener
	conns  []net.Conn
}

func newTCPCut(t *testing.T, target string) *tcpCut {
	c := &tcpCut{t: t, addr: freeLoopback(t), target: target}
	c.restore()
	t.Cleanup(c.cut)
	return c
}

func (c *tcpCut) restore() {
	l, err := net.Listen("tcp", c.addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.l = l
	c.mu.Unlock()
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", c.target)
			if err != nil {
				in.Close()
				continue
			}
			c.mu.Lock()
			c.conns = append(c.conns, in, out)
			c.mu.Unlock()
			go func() { io.Copy(out, in); out.Close() }()
			go func() { io.Copy(in, out); in.Close() }()
		}
	}()
}

func (c *tcpCut) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.l != nil {
		c.l.Close()
		c.l = nil
	}
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}

// A self-fencing lease end to end: a pod with lease-seconds 5 and a
// grace period of 2 s on a device whose link to the broker is cut stops
// on the device within lease + grace of the cut (not before the lease
// could have run out), with DisruptionTarget; the link restored, it runs
// again, as the hub's document still places it there.
func TestLeasePodStopsWhenTheLinkIsCut(t *testing.T) {
	h := newPodhub(t)
	relay := newTCPCut(t, h.addr)
	dir := filepath.Join(t.TempDir(), "dev-1")
	out, code := h.cli("device", "add", "dev-1", "--out", dir, "--install-dir", dir, "--url", "mqtts://"+relay.addr)
	if code != 0 {
		t.Fatalf("device add: %s", out)
	}
	cfg, _ := os.ReadFile(filepath.Join(dir, "podvisor.yaml"))
	d := newDaemon(t)
	d.withConfig(string(cfg) + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 60*time.Second, "dev-1 Ready", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "dev-1") == "Ready"
	})
	pids := t.TempDir()
	const lease, grace = 5 * time.Second, 2 * time.Second
	// It tolerates the hub's unreachable taint for long: the hub keeps it
	// placed on the device through the cut.
	pod := "apiVersion: v1\nkind: Pod\nmetadata:\n  name: store\n  labels: {app: store}\n  annotations: {fencing.podvisor.io/lease-seconds: \"5\"}\nspec:\n" +
		"  tolerations: [{key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute, tolerationSeconds: 600}]\n" +
		"  " + strings.ReplaceAll(pidPodSpec(pids, int(grace.Seconds())), "\n", "\n  ") + "\n"
	// The script ignores SIGTERM: the stop runs the whole grace period.
	pod = strings.Replace(pod, "echo $$$$ >", "trap '' TERM; echo $$$$ >", 1)
	pod = strings.Replace(pod, "exec sleep 1004", "while :; do sleep 0.1; done", 1)
	file := filepath.Join(t.TempDir(), "store.yaml")
	os.WriteFile(file, []byte(pod), 0o644)
	if out, code := h.cli("apply", "-f", file); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	var pid int
	waitForLong(t, 60*time.Second, "the lease pod running", func() bool { pid = pidOf(pids, "store"); return pid > 0 && alive(pid) })
	os.Remove(filepath.Join(pids, "store.pid"))
	time.Sleep(2 * time.Second) // a few renewals

	cut := time.Now()
	relay.cut()
	waitForLong(t, lease+grace+5*time.Second, "the lease pod stopped", func() bool { return !alive(pid) })
	stopped := time.Since(cut)
	t.Logf("the lease pod stopped %v after the link was cut (lease %v, grace %v)", stopped.Round(time.Millisecond), lease, grace)
	// The lease renews at the send time of the newest heartbeat the hub
	// answered (uplink's leaseLink), every lease/4 while a lease pod runs
	// (the base period is 30 s): the newest sent before the cut may have
	// lost its receipt to the cut, so the renewal is at most two periods
	// before it (receipts within a period). The pod ignores SIGTERM: it
	// runs the lease and the whole grace period from the renewal, never
	// less (the design's bound, exact; stopped is read after the pid is
	// reaped). The upper bound is liveness only: the daemon's timer, the
	// SIGKILL and the reaping on a loaded machine.
	heartbeat := lease / 4
	if low, high := lease+grace-2*heartbeat, lease+grace+3*time.Second; stopped < low || stopped > high {
		t.Fatalf("stopped %v after the cut, want within [%v, %v]", stopped, low, high)
	}
	out, _, _ = d.cli("get", "pod", "store", "-o", "json")
	var p v1.Pod
	json.Unmarshal([]byte(out), &p)
	var target *v1.PodCondition
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == v1.DisruptionTarget {
			target = &p.Status.Conditions[i]
		}
	}
	if target == nil || target.Reason != v1.PodReasonTerminationByKubelet || !strings.Contains(target.Message, "lease") || p.Status.Phase != v1.PodFailed {
		t.Fatalf("the stopped pod: phase %s conditions %+v, want Failed with DisruptionTarget TerminationByKubelet", p.Status.Phase, p.Status.Conditions)
	}
	if out, _, _ := d.cli("describe", "pod", "store"); !strings.Contains(out, "LeaseExpired") {
		t.Errorf("describe pod store lacks the LeaseExpired event:\n%s", out)
	}

	relay.restore()
	waitForLong(t, 60*time.Second, "the lease pod runs again once the link is back", func() bool {
		pid := pidOf(pids, "store")
		return pid > 0 && alive(pid)
	})
}
