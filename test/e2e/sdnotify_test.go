package e2e

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// notified is one message the daemon sent to its notify socket.
type notified struct {
	at  time.Time
	msg string
}

// notifySocket stands for systemd's: NOTIFY_SOCKET names it for every
// daemon the test starts, with a watchdog period (no WATCHDOG_PID: the
// daemon's pid is not known before it starts, and systemd's rule without
// it is the same).
func notifySocket(t *testing.T, watchdog time.Duration) <-chan notified {
	t.Helper()
	dir, err := os.MkdirTemp("", "sdnotify") // short: a socket's path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "1000000")
	t.Setenv("WATCHDOG_PID", "")
	out := make(chan notified, 256)
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			out <- notified{time.Now(), string(buf[:n])}
		}
	}()
	t.Cleanup(func() { conn.Close(); <-done; os.RemoveAll(dir) })
	return out
}

// awaitNotified reads messages until one carries the assignment want; it
// returns those read.
func awaitNotified(t *testing.T, ch <-chan notified, want string, within time.Duration) []notified {
	t.Helper()
	var got []notified
	deadline := time.After(within)
	for {
		select {
		case n := <-ch:
			got = append(got, n)
			if hasAssignment(n.msg, want) {
				return got
			}
		case <-deadline:
			t.Fatalf("no %s within %s; got %+v", want, within, got)
		}
	}
}

func hasAssignment(msg, a string) bool {
	for line := range strings.SplitSeq(msg, "\n") {
		if line == a {
			return true
		}
	}
	return false
}

// The real daemon under a stand-in for systemd: a status while it
// recovers, READY once its API answers with the pods adopted, status
// lines as its pods change, a ping every half watchdog period, STOPPING on
// SIGTERM; restarted, it adopts the pod that ran on before READY.
func TestSystemdNotify(t *testing.T) {
	requireRoot(t)
	ch := notifySocket(t, time.Second)
	d := newDaemon(t)
	d.write("web.yaml", processPod("web", "Always", 2, "exec sleep 1000"))
	d.start()
	got := awaitNotified(t, ch, "READY=1", 10*time.Second)
	if !strings.HasPrefix(got[0].msg, "STATUS=recovering: ") {
		t.Errorf("first message %q, want the recovering status", got[0].msg)
	}
	ready := got[len(got)-1]
	if !strings.Contains(ready.msg, "STATUS=running 1 pod") {
		t.Errorf("READY came with %q, want the running status", ready.msg)
	}
	if _, err := d.client.Version(context.Background()); err != nil {
		t.Errorf("READY, but the API does not answer: %v", err)
	}
	p := d.waitPod("web", 10*time.Second, running)
	awaitNotified(t, ch, "STATUS=running 1 pod", 5*time.Second) // ready: the note goes

	// Pings: every half second, from the loop of an idle daemon.
	var pings []time.Time
	end := time.After(3 * time.Second)
collect:
	for {
		select {
		case n := <-ch:
			if hasAssignment(n.msg, "WATCHDOG=1") {
				pings = append(pings, n.at)
			}
			if strings.Contains(n.msg, "STATUS=") {
				t.Errorf("an idle daemon changed its status: %q", n.msg)
			}
		case <-end:
			break collect
		}
	}
	// Each ping is stamped when this test's reader wakes, so a late
	// wake-up moves single gaps both ways: the typical gap is judged by
	// the median, single gaps only against a flood and against what
	// systemd needs (none over the 1 s watchdog period).
	if len(pings) < 4 {
		t.Errorf("%d pings in 3 s, want one every 0.5 s", len(pings))
	}
	var gaps []time.Duration
	for i := 1; i < len(pings); i++ {
		gaps = append(gaps, pings[i].Sub(pings[i-1]))
	}
	if len(gaps) > 0 {
		sorted := slices.Clone(gaps)
		slices.Sort(sorted)
		if med := sorted[len(sorted)/2]; med < 450*time.Millisecond || med > 800*time.Millisecond {
			t.Errorf("median ping gap %s, want 0.5 s (half the watchdog period): gaps %v", med, gaps)
		}
		if sorted[0] < 250*time.Millisecond || sorted[len(sorted)-1] > time.Second {
			t.Errorf("ping gaps %v: want none under 0.25 s (a flood) nor over the 1 s watchdog period", gaps)
		}
	}

	d.stop(syscall.SIGTERM)
	got = awaitNotified(t, ch, "STOPPING=1", 5*time.Second)
	if msg := got[len(got)-1].msg; !strings.Contains(msg, "STATUS=stopping: leaving 1 pod running") {
		t.Errorf("STOPPING came with %q, want the pod left running", msg)
	}

	// Restarted: READY once the pod that ran on is adopted.
	d.start()
	got = awaitNotified(t, ch, "READY=1", 10*time.Second)
	if !strings.Contains(got[len(got)-1].msg, "STATUS=running 1 pod") {
		t.Errorf("READY after the restart came with %q", got[len(got)-1].msg)
	}
	again := d.waitPod("web", time.Second, func(*v1.Pod) bool { return true })
	cs, was := again.Status.ContainerStatuses[0], p.Status.ContainerStatuses[0]
	if cs.State.Running == nil || cs.ContainerID != was.ContainerID || cs.RestartCount != 0 {
		t.Errorf("after the restart web's container is %s %+v, want %s adopted, running", cs.ContainerID, cs.State, was.ContainerID)
	}
}
