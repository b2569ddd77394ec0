package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

const sharedPID = `apiVersion: v1
kind: Pod
metadata:
  name: pidshare
spec:
  shareProcessNamespace: true
  hostNetwork: true
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: ` + testImage + `
    imagePullPolicy: Never
    command: ["sleep", "3600"]
  - name: debug
    image: ` + testImage + `
    imagePullPolicy: Never
    command: ["sleep", "3601"]
`

// shareProcessNamespace: both containers see each other's processes, the
// pod's init is pid 1 (podvisor-shim --pod-init, no pause image), one
// container can signal the other, and the init survives a daemon kill -9
// and goes with the pod.
func TestContainerdSharedPIDNamespace(t *testing.T) {
	d, _ := ctrdDaemon(t)
	d.write("pidshare.yaml", sharedPID)
	p := d.waitPod("pidshare", 30*time.Second, func(p *v1.Pod) bool { return bothReady(p) })

	out, errOut, code := d.cli("exec", "pidshare", "-c", "debug", "--", "sh", "-c", "tr '\\0' ' ' < /proc/1/cmdline; echo; ps -o pid,args")
	if code != 0 {
		t.Fatalf("exec: %d %s%s", code, out, errOut)
	}
	lines := strings.SplitN(out, "\n", 2)
	if !strings.Contains(lines[0], "podvisor-shim --pod-init") {
		t.Fatalf("pid 1 of the pod is %q, want the pod's init", lines[0])
	}
	if !strings.Contains(out, "sleep 3600") || !strings.Contains(out, "sleep 3601") {
		t.Fatalf("the debug container does not see both containers' processes:\n%s", out)
	}

	sandboxDir := filepath.Join(d.dir, "sandbox", string(p.UID))
	initPid := readPid(t, filepath.Join(sandboxDir, "pid.init"))

	// kill -9 the daemon: the new one adopts the containers, in the same
	// namespace with the same init.
	d.stop(syscall.SIGKILL)
	d.start()
	d.waitPod("pidshare", 20*time.Second, bothReady)
	if got := readPid(t, filepath.Join(sandboxDir, "pid.init")); got != initPid || !alive(initPid) {
		t.Fatalf("init %d after the daemon restart (alive %v), want %d", got, alive(got), initPid)
	}

	// One container stops another's process: it exits and is restarted.
	if out, errOut, code := d.cli("exec", "pidshare", "-c", "debug", "--", "sh", "-c",
		"kill $(ps -o pid,args | grep '[s]leep 3600$' | { read pid _; echo $pid; })"); code != 0 {
		t.Fatalf("kill from the debug container: %d %s%s", code, out, errOut)
	}
	d.waitPod("pidshare", 20*time.Second, func(p *v1.Pod) bool {
		c := statusOf(p, "app")
		return c.RestartCount == 1 && c.State.Running != nil
	})
	out, _, _ = d.cli("exec", "pidshare", "-c", "app", "--", "ps", "-o", "args")
	if !strings.Contains(out, "sleep 3601") {
		t.Fatalf("the restarted app container is not in the pod's PID namespace:\n%s", out)
	}

	d.remove("pidshare.yaml")
	d.waitGone("pidshare", 30*time.Second)
	waitFor(t, "the sandbox's pid-namespace init to exit", func() bool { return !alive(initPid) })
	if _, err := os.Stat(sandboxDir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind (%v)", sandboxDir, err)
	}
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}
