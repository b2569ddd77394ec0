package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
)

const testImage = "podvisor.test/busybox:1"

// ctrdDaemon is a daemon on a private containerd, with the test image
// side-loaded through <data-dir>/images.
func ctrdDaemon(t *testing.T, extraConfig ...string) (*daemon, *ctrdtest.Containerd) {
	return ctrdDaemonOf(t, "", extraConfig...)
}

// ctrdDaemonOf is ctrdDaemon running podvisor binary bin (and the plugin
// and shim beside it), or the one under test if bin is empty.
func ctrdDaemonOf(t *testing.T, bin string, extraConfig ...string) (*daemon, *ctrdtest.Containerd) {
	return ctrdDaemonWith(t, bin, "", extraConfig...)
}

// ctrdDaemonWith is ctrdDaemonOf with more config sections (a hub:
// section, say) after the containerd one.
func ctrdDaemonWith(t *testing.T, bin, sections string, extraConfig ...string) (*daemon, *ctrdtest.Containerd) {
	requireRoot(t)
	ctrd := ctrdtest.Start(t)
	d := newDaemon(t)
	d.bin = bin
	sandboxes := filepath.Join(d.dir, "sandbox")
	t.Cleanup(func() {
		// The daemon first, or it restarts what is killed here; then the
		// containers (containerd stops later, in ctrd.Close). Pods left
		// running keep their namespaces and tmpfs mounted, and a shared
		// PID namespace its init.
		d.kill()
		if left := ctrdtest.KillTasks(ctrd.Address); len(left) > 0 {
			t.Errorf("container processes %v survived SIGKILL", left)
		}
		inits, _ := filepath.Glob(filepath.Join(sandboxes, "*", "pid.init"))
		for _, f := range inits {
			var pid int
			if b, err := os.ReadFile(f); err == nil && parsePid(string(b), &pid) && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		ctrdtest.UnmountUnder(d.dir)
	})
	if _, err := os.Stat("/usr/lib/cni/bridge"); err != nil {
		prerequisite(t, "CNI plugins (Debian's containernetworking-plugins): %v", err)
	}
	d.withConfig(fmt.Sprintf("containerd: {address: %s, runcRoot: %s, sandboxDir: %s, cniConfDir: %s%s}\n%s",
		ctrd.Address, ctrd.RuncRoot(), sandboxes, filepath.Join(d.dir, "cni"), strings.Join(extraConfig, ""), sections))
	d.start()
	if err := os.MkdirAll(filepath.Join(d.data, "images"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := ociimage.WriteFile(filepath.Join(d.data, "images", "busybox.tar"), ociimage.Image{Name: testImage, Cmd: []string{"sh"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "podvisor images to list the test image", func() bool {
		out, _, _ := d.cli("images")
		return strings.Contains(out, testImage)
	})
	return d, ctrd
}

// ctrContainers lists the containers in podvisor's containerd namespace.
func ctrContainers(t *testing.T, ctrd *ctrdtest.Containerd) []string {
	out, err := exec.Command("ctr", "-a", ctrd.Address, "-n", "podvisor", "containers", "ls", "-q").Output()
	if err != nil {
		t.Fatalf("ctr: %v", err)
	}
	return strings.Fields(string(out))
}

const twoContainers = `apiVersion: v1
kind: Pod
metadata:
  name: duo
  labels: {app: duo}
spec:
  terminationGracePeriodSeconds: 2
  volumes:
  - name: shared
    emptyDir: {}
  - name: scratch
    emptyDir: {medium: Memory, sizeLimit: 8Mi}
  - name: info
    downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}, {path: labels, fieldRef: {fieldPath: metadata.labels}}]}
  containers:
  - name: server
    image: ` + testImage + `
    imagePullPolicy: Never
    command: ["sh", "-c", "echo hello from $(hostname) > /www/index.html; exec httpd -f -p 8080 -h /www"]
    volumeMounts: [{name: shared, mountPath: /www}, {name: info, mountPath: /etc/podinfo, readOnly: true}]
    resources: {limits: {memory: 48Mi, cpu: 250m}}
    ports: [{containerPort: 8080, hostPort: HOSTPORT}]
    readinessProbe: {httpGet: {path: /index.html, port: 8080}, periodSeconds: 1}
    livenessProbe: {exec: {command: ["test", "-e", "/www/index.html"]}, periodSeconds: 1}
  - name: client
    image: ` + testImage + `
    imagePullPolicy: Never
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: GREETING, value: "hi $(POD_NAME)"}
    command: ["sh", "-c"]
    args:
    - |
      echo "$GREETING"
      while [ ! -e /www/crash ]; do wget -q -O - http://localhost:8080/index.html || echo fetch-failed; sleep 0.2; done
      rm /www/crash; echo crashing; exit 3
    volumeMounts: [{name: shared, mountPath: /www}, {name: scratch, mountPath: /scratch}]
`

func bothReady(p *v1.Pod) bool {
	if len(p.Status.ContainerStatuses) != 2 {
		return false
	}
	for _, c := range p.Status.ContainerStatuses {
		if !c.Ready {
			return false
		}
	}
	return true
}

func statusOf(p *v1.Pod, name string) v1.ContainerStatus {
	for _, c := range p.Status.ContainerStatuses {
		if c.Name == name {
			return c
		}
	}
	return v1.ContainerStatus{}
}

// The end-to-end check: a two-container pod on real containerd
// and runc, side-loaded image, localhost between containers, hostname,
// env, volumes, limits, exec, logs, restart after a crash, adoption after
// kill -9, containerd restarted under it, and removal.
func TestContainerdPod(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	hostPort := 20000 + os.Getpid()%10000
	d.write("duo.yaml", strings.Replace(twoContainers, "HOSTPORT", fmt.Sprint(hostPort), 1))
	p := d.waitPod("duo", 30*time.Second, bothReady)
	if p.Status.Phase != v1.PodRunning || p.Status.QOSClass != v1.PodQOSBurstable {
		t.Fatalf("status: %s", describePod(p))
	}
	server := statusOf(p, "server")
	if !strings.HasPrefix(server.ContainerID, "containerd://") {
		t.Fatalf("containerID %q, want containerd://…", server.ContainerID)
	}

	// Containers of a pod reach each other on localhost, and the pod's
	// hostname is its name.
	waitFor(t, "duo's client to log both greetings", func() bool {
		out, _, _ := d.cli("logs", "duo", "-c", "client")
		return strings.Contains(out, "hi duo\n") && strings.Contains(out, "hello from duo\n")
	})
	// The pod has its own address on the CNI bridge, its hostname
	// resolves to it, and its hostPort reaches the server (tested on
	// loopback: the DNAT happens in this host's kernel).
	if p.Status.PodIP == "" || p.Status.PodIP == p.Status.HostIP {
		t.Fatalf("podIP %q (hostIP %q): want an address of the pod's own", p.Status.PodIP, p.Status.HostIP)
	}
	if out, _, _ := d.cli("exec", "duo", "--", "cat", "/etc/hosts"); !strings.Contains(out, p.Status.PodIP+"\tduo") {
		t.Fatalf("/etc/hosts does not map duo to %s:\n%s", p.Status.PodIP, out)
	}
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/index.html", hostPort))
	if err != nil {
		t.Fatalf("hostPort %d: %v", hostPort, err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from duo\n" {
		t.Fatalf("hostPort %d answered %q", hostPort, body)
	}
	// exec, in the container's own view: the downward API volume, the
	// memory-backed emptyDir, /etc/hosts, and an exit code that comes back.
	out, errOut, code := d.cli("exec", "duo", "-c", "client", "--", "sh", "-c",
		"cat /www/index.html; grep -c tmpfs /proc/mounts >/dev/null && df /scratch | tail -1; hostname")
	if code != 0 || !strings.Contains(out, "hello from duo") || !strings.HasSuffix(out, "duo\n") {
		t.Fatalf("exec: code %d\n%s%s", code, out, errOut)
	}
	out, _, code = d.cli("exec", "duo", "-c", "server", "--", "cat", "/etc/podinfo/name", "/etc/podinfo/labels")
	if code != 0 || out != "duo"+`app="duo"`+"\n" {
		t.Fatalf("downward API volume: %q (exit %d)", out, code)
	}
	if _, _, code = d.cli("exec", "duo", "--", "sh", "-c", "exit 7"); code != 7 {
		t.Fatalf("exec exit code %d, want 7", code)
	}
	// The kubelet's limits in podvisor's cgroup layout, one cgroup per
	// container instance, named by its containerd ID.
	cg := filepath.Join(cgroupRootOf(d), "burstable", "pod"+string(p.UID), strings.TrimPrefix(server.ContainerID, "containerd://"))
	if got := cgroupFile(t, "memory", cg, "memory.limit_in_bytes", "memory.max"); got != fmt.Sprint(48<<20) {
		t.Fatalf("memory limit %s", got)
	}
	if got := cgroupFile(t, "cpu", cg, "cpu.cfs_quota_us", "cpu.max"); !strings.HasPrefix(got, "25000") {
		t.Fatalf("cpu quota %s", got)
	}

	// A crash restarts the container, and the old one leaves containerd.
	d.cli("exec", "duo", "-c", "server", "--", "touch", "/www/crash")
	p = d.waitPod("duo", 20*time.Second, func(p *v1.Pod) bool {
		c := statusOf(p, "client")
		return c.RestartCount == 1 && c.State.Running != nil
	})
	if last := statusOf(p, "client").LastTerminationState.Terminated; last == nil || last.ExitCode != 3 {
		t.Fatalf("lastState %+v, want exit 3", last)
	}
	if out, _, _ := d.cli("logs", "duo", "-c", "client", "--previous"); !strings.Contains(out, "crashing") {
		t.Fatalf("previous log: %q", out)
	}
	waitFor(t, "containerd to hold both of duo's containers", func() bool { return len(ctrContainers(t, ctrd)) == 2 })

	// kill -9 the daemon: a new one adopts both containers as they are.
	server = statusOf(p, "server")
	d.stop(syscall.SIGKILL)
	d.start()
	p = d.waitPod("duo", 20*time.Second, bothReady)
	if got := statusOf(p, "server"); got.ContainerID != server.ContainerID || !got.State.Running.StartedAt.Equal(&server.State.Running.StartedAt) || got.RestartCount != 0 {
		t.Fatalf("after the daemon restart: %+v, want the same container %s", got, server.ContainerID)
	}

	// containerd restarts under the pod: nothing restarts, and exits are
	// still seen afterwards.
	if err := ctrd.Restart(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	d.cli("exec", "duo", "-c", "server", "--", "touch", "/www/crash")
	p = d.waitPod("duo", 30*time.Second, func(p *v1.Pod) bool {
		c := statusOf(p, "client")
		return c.RestartCount == 2 && c.State.Running != nil
	})
	if got := statusOf(p, "server"); got.ContainerID != server.ContainerID || got.RestartCount != 0 {
		t.Fatalf("containerd's restart restarted the server: %+v", got)
	}

	// Removal stops both, removes them from containerd and clears the
	// sandbox and the pod's files. The network and the sandbox go in the
	// background, right after the pod (off the daemon's loop).
	d.remove("duo.yaml")
	d.waitGone("duo", 30*time.Second)
	waitPodLeftNothing(t, d, ctrd, p, hostPort)
}

// waitPodLeftNothing waits until nothing of a removed CNI pod is left: no
// container in containerd, its hostPort closed, its sandbox, pod files and
// network-detach record gone (the network goes off the daemon's loop).
func waitPodLeftNothing(t *testing.T, d *daemon, ctrd *ctrdtest.Containerd, p *v1.Pod, hostPort int) {
	t.Helper()
	waitFor(t, "containerd to hold no container after "+p.Name+"'s removal", func() bool { return len(ctrContainers(t, ctrd)) == 0 })
	client := http.Client{Timeout: time.Second}
	waitFor(t, fmt.Sprintf("hostPort %d to stop answering after the pod is gone", hostPort), func() bool {
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/", hostPort))
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	})
	for _, dir := range []string{filepath.Join(d.dir, "sandbox", string(p.UID)), filepath.Join(d.data, "pods", string(p.UID)),
		filepath.Join(d.data, "network-detach", string(p.UID)+".json")} {
		waitFor(t, dir+" to be removed", func() bool {
			_, err := os.Stat(dir)
			return os.IsNotExist(err)
		})
	}
}

// backoffAndStart reads, on the daemon's clock, when the pod's container
// last started (its Started event) and when the last backoff before it
// would have ended (its BackOff event's time plus the delay it names).
func backoffAndStart(t *testing.T, d *daemon, pod string) (backoffEnd, started time.Time) {
	t.Helper()
	evs, err := d.client.Events(context.Background(), "default", pod)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		switch e.Reason {
		case "BackOff":
			rest, _ := strings.CutPrefix(e.Message, "Back-off ")
			delay, err := time.ParseDuration(strings.Fields(rest + " ")[0])
			if err != nil {
				t.Fatalf("BackOff event %q: %v", e.Message, err)
			}
			backoffEnd = e.LastTime.Add(delay)
		case "Started":
			started = e.FirstTime
		}
	}
	if backoffEnd.IsZero() || started.IsZero() {
		t.Fatalf("%s: no BackOff or no Started event: %+v", pod, evs)
	}
	return backoffEnd, started
}

// cgroupRootOf is the cgroup root the harness gave a daemon.
func cgroupRootOf(d *daemon) string {
	data, _ := os.ReadFile(d.config)
	s := string(data)
	i := strings.Index(s, "cgroups: {root: ")
	return strings.TrimSuffix(strings.TrimSpace(s[i+len("cgroups: {root: "):]), "}")
}

// An image that cannot be pulled leaves the container waiting, not
// crash-looping; a side-loaded image starts it without waiting out the
// backoff.
func TestContainerdImageErrors(t *testing.T) {
	d, _ := ctrdDaemon(t)
	pod := func(name, image, policy string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers:
  - {name: app, image: %s, imagePullPolicy: %s, command: ["sleep", "1000"]}
`, name, image, policy)
	}
	// Nothing listens on 127.0.0.1:1: the pull fails at once, on this host.
	d.write("pull.yaml", pod("pull", "127.0.0.1:1/missing:1", "IfNotPresent"))
	d.write("never.yaml", pod("never", "podvisor.test/later:1", "Never"))
	p := d.waitPod("pull", 20*time.Second, func(p *v1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ErrImagePull"
	})
	if c := p.Status.ContainerStatuses[0]; c.RestartCount != 0 || p.Status.Phase != v1.PodPending {
		t.Fatalf("a failed pull: %s", describePod(p))
	}
	d.waitPod("never", 20*time.Second, func(p *v1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "ErrImageNeverPull"
	})
	out, _, code := d.cli("images", "import", filepath.Join(d.dir, "missing.tar"))
	if code == 0 {
		t.Fatalf("importing a missing file succeeded: %s", out)
	}
	archive := filepath.Join(d.dir, "later.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: "podvisor.test/later:1"}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if out, errOut, code := d.cli("images", "import", archive); code != 0 || !strings.Contains(out, "imported podvisor.test/later:1") {
		t.Fatalf("import: %d %s %s", code, out, errOut)
	}
	d.waitPod("never", 10*time.Second, running)
	backoffEnd, started := backoffAndStart(t, d, "never")
	t.Logf("the pod ran %v after its image arrived, %v before its backoff's end", time.Since(start), backoffEnd.Sub(started))
	if !started.Before(backoffEnd) {
		t.Fatalf("the pod started at %v, its backoff ended at %v: the backoff was not cut short", started, backoffEnd)
	}
	// An image in use cannot be removed; a bad side-loaded file is named.
	if _, errOut, code := d.cli("images", "rm", "podvisor.test/later:1"); code == 0 || !strings.Contains(errOut, "used by a container") {
		t.Fatalf("removing an image in use: %d %s", code, errOut)
	}
	if err := os.WriteFile(filepath.Join(d.data, "images", "junk.tar"), []byte("not an archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "podvisor images to report junk.tar as not imported", func() bool {
		out, _, _ := d.cli("images")
		return strings.Contains(out, "not imported: "+filepath.Join(d.data, "images", "junk.tar"))
	})
}

// A daemon killed right after a pod with its own network was removed
// (its detach from the network runs in the background) leaves nothing of
// it once restarted: whether the detach was done, in flight or not begun,
// the next daemon finishes it.
func TestContainerdPodRemovedAcrossDaemonKill(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	hostPort := 20000 + (os.Getpid()+7)%10000
	d.write("duo.yaml", strings.Replace(twoContainers, "HOSTPORT", fmt.Sprint(hostPort), 1))
	p := d.waitPod("duo", 30*time.Second, bothReady)
	d.remove("duo.yaml")
	d.waitGone("duo", 30*time.Second)
	d.stop(syscall.SIGKILL)
	d.start()
	waitPodLeftNothing(t, d, ctrd, p, hostPort)
}

// A container that ends while no daemon runs reports its real exit code,
// learned from containerd, and a record whose container vanished ends as
// ContainerStatusUnknown.
func TestContainerdExitWhileDaemonDown(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	d.write("brief.yaml", `apiVersion: v1
kind: Pod
metadata: {name: brief}
spec:
  restartPolicy: Never
  containers:
  - {name: app, image: `+testImage+`, imagePullPolicy: Never, command: ["sh", "-c", "sleep 2; exit 5"]}
`)
	d.waitPod("brief", 20*time.Second, running)
	d.stop(syscall.SIGKILL)
	time.Sleep(3 * time.Second)
	d.start()
	p := d.waitPod("brief", 20*time.Second, func(p *v1.Pod) bool {
		return p.Status.ContainerStatuses[0].State.Terminated != nil
	})
	if term := p.Status.ContainerStatuses[0].State.Terminated; term.ExitCode != 5 || p.Status.Phase != v1.PodFailed {
		t.Fatalf("exit while down: %s", describePod(p))
	}
	waitFor(t, "containerd to hold no container", func() bool { return len(ctrContainers(t, ctrd)) == 0 })
}

// containerd.managed: podvisor runs its own containerd, restarts it when
// it dies (the pod runs on), and a restarted podvisor uses the one that
// is running.
func TestManagedContainerd(t *testing.T) {
	requireRoot(t)
	ctrdtest.Require(t)
	d := newDaemon(t)
	m := filepath.Join(d.dir, "m")
	sock := filepath.Join(m, "c.sock")
	pidFile := filepath.Join(d.data, "containerd", "containerd.pid")
	t.Cleanup(func() {
		// In this order: the daemon (it restarts a containerd that dies),
		// the containers (they outlive their shims), containerd (it writes
		// its root until it is gone), its shims, then the mounts.
		d.kill()
		if left := ctrdtest.KillTasks(sock); len(left) > 0 {
			t.Errorf("container processes %v survived SIGKILL", left)
		}
		if pid := managedPid(pidFile); pid > 0 {
			syscall.Kill(pid, syscall.SIGKILL)
			for i := 0; i < 250 && alive(pid); i++ {
				time.Sleep(20 * time.Millisecond)
			}
			if alive(pid) {
				t.Errorf("the managed containerd %d survived SIGKILL for 5s", pid)
			}
		}
		ctrdtest.KillShims(sock)
		ctrdtest.UnmountUnder(d.dir)
	})
	d.withConfig(fmt.Sprintf("containerd: {managed: true, address: %s, root: %s, state: %s, runcRoot: %s, sandboxDir: %s}\n",
		sock, filepath.Join(m, "root"), filepath.Join(m, "state"), filepath.Join(m, "runc"), filepath.Join(d.dir, "sandbox")))
	d.start()
	if err := ociimage.WriteFile(filepath.Join(d.dir, "img.tar"), ociimage.Image{Name: testImage}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the managed containerd to accept an image import", func() bool {
		_, _, code := d.cli("images", "import", filepath.Join(d.dir, "img.tar"))
		return code == 0
	})
	d.write("m.yaml", `apiVersion: v1
kind: Pod
metadata: {name: m}
spec:
  hostNetwork: true
  containers:
  - {name: app, image: `+testImage+`, imagePullPolicy: Never, command: ["sleep", "100000"]}
`)
	p := d.waitPod("m", 20*time.Second, running)
	id := p.Status.ContainerStatuses[0].ContainerID

	first := managedPid(pidFile)
	syscall.Kill(first, syscall.SIGKILL)
	waitFor(t, "the managed containerd to be restarted with a new pid", func() bool { pid := managedPid(pidFile); return pid > 0 && pid != first })
	time.Sleep(time.Second)
	p = d.waitPod("m", 10*time.Second, running)
	if c := p.Status.ContainerStatuses[0]; c.ContainerID != id || c.RestartCount != 0 {
		t.Fatalf("after containerd was killed and restarted: %+v, want container %s still running", c, id)
	}

	second := managedPid(pidFile)
	d.stop(syscall.SIGKILL)
	d.start()
	d.waitPod("m", 20*time.Second, running)
	if got := managedPid(pidFile); got != second || !alive(second) {
		t.Fatalf("a restarted podvisor started containerd %d; want the running %d", got, second)
	}
	if !strings.Contains(d.log.String(), "using podvisor's running containerd") {
		t.Fatalf("the restarted daemon did not adopt the running containerd:\n%s", d.log)
	}
}

func managedPid(pidFile string) int {
	data, _ := os.ReadFile(pidFile)
	var pid int
	fmt.Sscan(string(data), &pid)
	return pid
}

// Past the high threshold of the image file system, unused images are
// removed (least recently used first); an image in use stays.
func TestImageGarbageCollection(t *testing.T) {
	// Any used disk is over 1%: collection starts at the first check.
	d, _ := ctrdDaemon(t, ", imageFS: /, imageGC: {highThresholdPercent: 1, lowThresholdPercent: 0, minimumAge: 3s}")
	d.write("user.yaml", `apiVersion: v1
kind: Pod
metadata: {name: user}
spec:
  hostNetwork: true
  containers:
  - {name: app, image: `+testImage+`, imagePullPolicy: Never, command: ["sleep", "100000"]}
`)
	d.waitPod("user", 20*time.Second, running)
	archive := filepath.Join(d.dir, "spare.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: "podvisor.test/spare:1"}); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := d.cli("images", "import", archive); code != 0 {
		t.Fatalf("import: %s %s", out, errOut)
	}
	// The pressure check runs at least every monitorPeriod (10s).
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _, _ := d.cli("images")
		if !strings.Contains(out, "podvisor.test/spare:1") {
			if !strings.Contains(out, testImage) {
				t.Fatalf("the image in use was removed:\n%s", out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the unused image is still there after 30s:\n%s", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.Contains(d.log.String(), "removed unused images") {
		t.Fatal("no log line for the collection")
	}
}

// A container past its memory limit is killed by the kernel and reports
// OOMKilled, judged from its own cgroup.
func TestContainerdOOMKilled(t *testing.T) {
	d, _ := ctrdDaemon(t)
	d.write("hog.yaml", `apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  hostNetwork: true
  restartPolicy: Never
  containers:
  - name: app
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["tail", "/dev/zero"]
    resources: {limits: {memory: 16Mi}}
`)
	p := d.waitPod("hog", 30*time.Second, func(p *v1.Pod) bool {
		return p.Status.ContainerStatuses[0].State.Terminated != nil
	})
	if term := p.Status.ContainerStatuses[0].State.Terminated; term.Reason != "OOMKilled" || term.ExitCode != 137 {
		t.Fatalf("terminated %+v, want OOMKilled with exit code 137", term)
	}
}

func parsePid(s string, pid *int) bool {
	_, err := fmt.Sscan(s, pid)
	return err == nil
}
