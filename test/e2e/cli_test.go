package e2e

import (
	"bytes"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/syncbuf"

	v1 "k8s.io/api/core/v1"
)

// A user can describe what get shows: a rejected manifest's row, named
// after its file, is found as bad.yaml and as bad, and says why it was
// rejected. The socket may stand before the command, as kubectl's global
// flags do.
func TestCLIDescribesTheInvalidRowGetShows(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("bad.yaml", strings.Replace(processPod("bad", "Always", 2, "true"), "image: host", "image: host\n    imagePolicy: x", 1))
	d.waitPod("bad.yaml", 10*time.Second, func(p *v1.Pod) bool { return p.Status.Reason == "Invalid" })
	get, _, code := d.cli("get", "pods")
	if code != 0 || !strings.Contains(get, "bad.yaml") || !strings.Contains(get, "Invalid") {
		t.Fatalf("get pods (exit %d):\n%s", code, get)
	}
	for _, name := range []string{"bad.yaml", "bad"} {
		out, errOut, code := d.cli("describe", "pod", name)
		if code != 0 || !strings.Contains(out, "Invalid") || !strings.Contains(out, "spec.containers[0].imagePolicy") ||
			!strings.Contains(out, "FailedValidation") {
			t.Errorf("describe pod %s (exit %d, stderr %q):\n%s", name, code, errOut, out)
		}
	}
	before := exec.Command(binary, "--socket", d.socket, "get", "pods", "-A")
	out, err := before.Output()
	if err != nil || !strings.HasPrefix(string(out), "NAMESPACE ") || !strings.Contains(string(out), "default ") {
		t.Fatalf("podvisor --socket S get pods -A: %v\n%s", err, out)
	}
}

// Ctrl-C on logs -f ends it with exit code 0 and nothing on stderr, as
// kubectl logs -f does.
func TestLogsFollowCtrlCExitsQuietly(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("talker.yaml", processPod("talker", "Always", 1, "echo hello; exec sleep 1000"))
	d.waitPod("talker", 10*time.Second, running)
	cmd := exec.Command(binary, "logs", "-f", "talker", "--socket", d.socket)
	out := &lockedBuffer{}
	var errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
	})
	waitForLong(t, 10*time.Second, "logs -f to print the container's 'hello'", func() bool {
		return strings.Contains(out.String(), "hello")
	})
	cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		if err != nil || errb.Len() != 0 {
			t.Fatalf("logs -f after SIGINT: %v, stderr %q", err, errb.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("not within 10s: logs -f exiting after SIGINT")
	}
}

// lockedBuffer is a log the code under test writes while the test reads it.
type lockedBuffer = syncbuf.Buffer
