package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// shimPidsOf are the containerd-shim-runc-v2 processes of the containerd
// at address.
func shimPidsOf(address string) []int { return pidsOf("containerd-shim-runc-v2", address) }

// serving is the pids that are running shims, not containerd's short
// runs of the shim binary to start or clean one up (their last argument
// "start" or "delete"; a start for a new task runs at every restart).
func serving(pids []int) []int {
	var out []int
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		if err != nil || argv[len(argv)-1] == "start" || argv[len(argv)-1] == "delete" {
			continue
		}
		out = append(out, pid)
	}
	return out
}

// pidsOf are the processes of program with address as an argument.
func pidsOf(program, address string) []int {
	var pids []int
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		argv := bytes.Split(data, []byte{0})
		if err != nil || !strings.HasSuffix(string(argv[0]), program) || !bytes.Contains(data, []byte("\x00"+address+"\x00")) {
			continue
		}
		var pid int
		fmt.Sscan(filepath.Base(filepath.Dir(f)), &pid)
		pids = append(pids, pid)
	}
	return pids
}

// crasher is a pod whose container logs its run and, on its first run
// only, exits 1 after a second (a marker in an emptyDir says it ran).
func crasher(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  volumes: [{name: state, emptyDir: {}}]
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "if [ -e /state/ran ]; then echo second run; exec sleep 1000; fi; touch /state/ran; echo first run; sleep 1; exit 1"]
    volumeMounts: [{name: state, mountPath: /state}]
`, name, testImage)
}

func restartedOnce(p *v1.Pod) bool {
	return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1 &&
		p.Status.ContainerStatuses[0].State.Running != nil
}

// Every containerd container of the device runs under one containerd shim
// (containerd.shimGroup: device, the default), restarts included, and the
// logs of both runs are kept without a log process per container.
func TestContainerdPodsShareOneShim(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	for _, name := range []string{"one", "two", "three"} {
		d.write(name+".yaml", crasher(name))
	}
	for _, name := range []string{"one", "two", "three"} {
		d.waitPod(name, 30*time.Second, restartedOnce)
	}
	waitFor(t, "3 pods under one running containerd shim", func() bool { return len(serving(shimPidsOf(ctrd.Address))) == 1 })
	waitFor(t, `logs of pod two to say "second run", and --previous "first run"`, func() bool {
		out, _, _ := d.cli("logs", "two")
		prev, _, _ := d.cli("logs", "two", "--previous")
		return out == "second run\n" && prev == "first run\n"
	})
}

// With containerd.shimGroup: pod, each pod has its own shim, and a
// restarted container joins it: the shim outlives the container that
// started it.
func TestContainerdShimPerPod(t *testing.T) {
	d, ctrd := ctrdDaemon(t, ", shimGroup: pod")
	d.write("solo.yaml", crasher("solo"))
	d.waitPod("solo", 30*time.Second, func(p *v1.Pod) bool { // its first run
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil &&
			p.Status.ContainerStatuses[0].RestartCount == 0
	})
	first := serving(shimPidsOf(ctrd.Address))
	d.write("other.yaml", crasher("other"))
	d.waitPod("other", 30*time.Second, restartedOnce)
	p := d.waitPod("solo", 30*time.Second, restartedOnce)
	shims := serving(shimPidsOf(ctrd.Address))
	if len(shims) != 2 || len(first) != 1 || (shims[0] != first[0] && shims[1] != first[0]) {
		t.Fatalf("shims %v in solo's first run, %v once both pods restarted (solo %d times): want solo's shim kept and one more",
			first, shims, p.Status.ContainerStatuses[0].RestartCount)
	}
	d.remove("solo.yaml")
	d.remove("other.yaml")
	d.waitGone("solo", 30*time.Second)
	d.waitGone("other", 30*time.Second)
	waitFor(t, "the pods' shims to exit once the pods are gone", func() bool { return len(shimPidsOf(ctrd.Address)) == 0 })
}

// With containerd.shimGroup: container, each container has a shim of
// its own (containerd's default), as many as the pod has containers, and
// they exit with the pod.
func TestContainerdShimPerContainer(t *testing.T) {
	d, ctrd := ctrdDaemon(t, ", shimGroup: container")
	d.write("pair.yaml", `apiVersion: v1
kind: Pod
metadata: {name: pair}
spec:
  hostNetwork: true
  terminationGracePeriodSeconds: 1
  containers:
  - {name: one, image: `+testImage+`, imagePullPolicy: Never, command: ["sleep", "1000"]}
  - {name: two, image: `+testImage+`, imagePullPolicy: Never, command: ["sleep", "1000"]}
`)
	d.waitPod("pair", 30*time.Second, func(p *v1.Pod) bool {
		s := p.Status.ContainerStatuses
		return len(s) == 2 && s[0].State.Running != nil && s[1].State.Running != nil
	})
	if shims := serving(shimPidsOf(ctrd.Address)); len(shims) != 2 {
		t.Fatalf("shims %v for a pod of 2 running containers, want one each", shims)
	}
	d.remove("pair.yaml")
	d.waitGone("pair", 30*time.Second)
	waitFor(t, "the containers' shims to exit once the pod is gone", func() bool { return len(shimPidsOf(ctrd.Address)) == 0 })
}

const talker = `apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  hostNetwork: true
  containers:
  - name: main
    image: ` + testImage + `
    imagePullPolicy: Never
    command: ["sh", "-c", "i=0; while :; do echo line $i; i=$((i+1)); sleep 0.05; done"]
`

// The plugin reads containers' output: killed (the daemon starts a new
// one), its successor re-opens the FIFOs of the running containers, and
// what a container prints meanwhile and afterwards reaches its log, in
// order, nothing lost or repeated.
func TestContainerdPluginRestartKeepsLogging(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	d.write("talker.yaml", talker)
	d.waitPod("talker", 30*time.Second, func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].State.Running != nil
	})
	lines := func() []string {
		out, _, _ := d.cli("logs", "talker")
		return strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	}
	waitFor(t, "talker to log 5 lines", func() bool { return len(lines()) >= 5 })
	plugins := pidsOf("podvisor-containerd", ctrd.Address)
	if len(plugins) != 1 {
		t.Fatalf("plugin processes %v, want 1", plugins)
	}
	if err := syscall.Kill(plugins[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	before := len(lines())
	waitFor(t, "a new plugin", func() bool {
		p := pidsOf("podvisor-containerd", ctrd.Address)
		return len(p) == 1 && p[0] != plugins[0]
	})
	waitFor(t, "talker to log 20 more lines after the plugin was killed", func() bool { return len(lines()) >= before+20 })
	for i, line := range lines() {
		if want := fmt.Sprintf("line %d", i); line != want {
			t.Fatalf("log line %d is %q, want %q: a line was lost or repeated across the plugin's restart", i, line, want)
		}
	}
}
