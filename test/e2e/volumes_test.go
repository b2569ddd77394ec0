package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// waitingReason is a container's waiting reason and message, if it waits.
func waitingReason(p *v1.Pod, name string) (string, string) {
	if w := statusOf(p, name).State.Waiting; w != nil {
		return w.Reason, w.Message
	}
	return "", ""
}

// configErrorFor is a condition: every named container waits with
// CreateContainerConfigError.
func configErrorFor(names ...string) func(p *v1.Pod) bool {
	return func(p *v1.Pod) bool {
		for _, n := range names {
			if r, _ := waitingReason(p, n); r != "CreateContainerConfigError" {
				return false
			}
		}
		return true
	}
}

// mountsUnder lists the mount points at or below dir in this process's
// mount table.
func mountsUnder(t *testing.T, dir string) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			out = append(out, f[4])
		}
	}
	return out
}

// requireNothingMounted fails the test if anything is still mounted under
// the daemon's data dir once its pods are gone.
func requireNothingMounted(t *testing.T, d *daemon) {
	t.Helper()
	if m := mountsUnder(t, d.data); len(m) > 0 {
		t.Fatalf("still mounted after the pods are gone: %v", m)
	}
}

// killContainersAtCleanup stops the daemon when the test ends, then
// kills every process left in its cgroups and unmounts what is left
// under its directory: a test that fails before its pods are removed
// would otherwise leave containers running (shims die with containerd,
// containers do not), and a live daemon would restart them and mount
// again after the harness's unmounting.
func killContainersAtCleanup(t *testing.T, d *daemon) {
	data, err := os.ReadFile(d.config)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(data), "cgroups: {root: ")
	root, _, _ := strings.Cut(rest, "}")
	if root = strings.TrimSpace(root); root == "" {
		t.Fatalf("no cgroup root in %s", d.config)
	}
	t.Cleanup(func() {
		d.stop(syscall.SIGKILL)
		dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", root))
		for _, dir := range append(dirs, filepath.Join("/sys/fs/cgroup", root)) {
			filepath.WalkDir(dir, func(path string, e fs.DirEntry, err error) error {
				if err == nil && e.Name() == "cgroup.procs" {
					procs, _ := os.ReadFile(path)
					for _, f := range strings.Fields(string(procs)) {
						var pid int
						if fmt.Sscan(f, &pid); pid > 0 {
							syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				}
				return nil
			})
		}
		exec.Command("sh", "-c", "grep "+d.dir+" /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r umount -l").Run()
	})
}

// hostNonce is a path under the host's /tmp that an escape would create.
func hostNonce(t *testing.T) string {
	name := fmt.Sprintf("podvisor-escape-%s-%d", strings.ToLower(t.Name()), os.Getpid())
	t.Cleanup(func() { os.RemoveAll(filepath.Join("/tmp", name)) })
	return name
}

// CVE-2017-1002101 on podvisor: an init container plants a link to "/" in
// an emptyDir, and the app container mounts it through subPath. The mount
// is refused with the kubelet's words, creating a directory through the
// link creates nothing on the host, and real subdirectories and files
// still mount.
func TestSubPathSymlinkEscape(t *testing.T) {
	nonce := hostNonce(t) // removed after the daemon is gone
	d, _ := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	d.write("subpaths.yaml", `apiVersion: v1
kind: Pod
metadata: {name: subpaths}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - name: plant
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir /work/real && echo inside > /work/real/f && echo conf > /work/conf && ln -s / /work/evil && ln -s real /work/inner"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: legit
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sh", "-c", "cat /mnt/real/f /etc/conf.txt && touch /mnt/made/x && echo made; while [ ! -e /work/crash ]; do sleep 0.2; done; exit 1"]
    volumeMounts:
    - {name: work, mountPath: /work}
    - {name: work, mountPath: /mnt/real, subPath: real}
    - {name: work, mountPath: /etc/conf.txt, subPath: conf, readOnly: true}
    - {name: work, mountPath: /mnt/made, subPath: made/deep}
  - name: root
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sleep", "1000"]
    volumeMounts: [{name: work, mountPath: /host, subPath: evil}]
  - name: mkdir
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sleep", "1000"]
    volumeMounts: [{name: work, mountPath: /host, subPath: evil/tmp/`+nonce+`}]
  - name: inner
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sleep", "1000"]
    volumeMounts: [{name: work, mountPath: /host, subPath: inner}]
`)
	p := d.waitPod("subpaths", 30*time.Second, func(p *v1.Pod) bool {
		return statusOf(p, "legit").State.Running != nil && configErrorFor("root", "mkdir", "inner")(p)
	})
	for c, step := range map[string]string{"root": "prepare subPath", "mkdir": "create subPath directory", "inner": "prepare subPath"} {
		if _, msg := waitingReason(p, c); msg != fmt.Sprintf(`failed to %s for volumeMount "work" of container %q`, step, c) {
			t.Errorf("container %s: message %q, want the kubelet's", c, msg)
		}
	}
	if _, err := os.Lstat(filepath.Join("/tmp", nonce)); err == nil {
		t.Errorf("/tmp/%s was created on the host through the planted link", nonce)
	}
	waitForLong(t, 10*time.Second, "the legit container's output", func() bool {
		out, _, _ := d.cli("logs", "subpaths", "-c", "legit")
		return out == "inside\nconf\nmade\n"
	})
	made := d.volumeFile(p, "work", "made", "deep", "x")
	if _, err := os.Stat(made); err != nil {
		t.Errorf("the subPath created for the container is not in the volume: %v", err)
	}
	// The running container swaps its subPath for a link to "/" and
	// crashes: the restart resolves the subPath again and refuses it.
	if out, errOut, code := d.cli("exec", "subpaths", "-c", "legit", "--", "sh", "-c", "rm -r /work/real && ln -s / /work/real && touch /work/crash"); code != 0 {
		t.Fatalf("swapping the subPath: %d %s %s", code, out, errOut)
	}
	p = d.waitPod("subpaths", 40*time.Second, func(p *v1.Pod) bool {
		return statusOf(p, "legit").RestartCount == 1 || configErrorFor("legit")(p)
	})
	if r, msg := waitingReason(p, "legit"); r != "CreateContainerConfigError" || !strings.Contains(msg, `volumeMount "work" of container "legit"`) {
		t.Errorf("the restart after the swap: %s", describePod(p))
	}

	d.remove("subpaths.yaml")
	d.waitGone("subpaths", 30*time.Second)
	waitForLong(t, 10*time.Second, "the pod's directory to go", func() bool {
		_, err := os.Stat(filepath.Join(d.data, "pods", string(p.UID)))
		return os.IsNotExist(err)
	})
	requireNothingMounted(t, d)
}

// An earlier pod plants links in an allowed hostPath directory. A later
// pod's hostPath through the link to "/" is refused at mount time, so is
// DirectoryOrCreate through a link (nothing is created outside), and so is
// a subPath through it; real directories under the allowed path still
// mount, and survive the pod's removal.
func TestHostPathSymlinkEscape(t *testing.T) {
	nonce := hostNonce(t) // removed after the daemon is gone
	d, _ := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	allowed := filepath.Join(d.dir, "allowed")
	d.stop(syscall.SIGTERM)
	f, err := os.OpenFile(d.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintf(f, "security: {allowedHostPaths: [%s]}\n", allowed)
	f.Close()
	d.start()
	pod := func(name, volumes, mounts string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  volumes: %s
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "echo hello > /data/hello; ls /data; exec sleep 1000"]
    volumeMounts: %s
`, name, volumes, testImage, mounts)
	}
	d.write("planter.yaml", strings.Replace(pod("planter",
		`[{name: data, hostPath: {path: `+allowed+`, type: DirectoryOrCreate}}]`,
		`[{name: data, mountPath: /data}]`),
		"exec sleep 1000", "ln -s / /data/link && ln -s /tmp /data/tmplink && mkdir /data/real", 1))
	waitForLong(t, 20*time.Second, "the planter pod's links", func() bool {
		_, err1 := os.Lstat(filepath.Join(allowed, "tmplink"))
		_, err2 := os.Stat(filepath.Join(allowed, "real"))
		return err1 == nil && err2 == nil
	})
	d.remove("planter.yaml")
	d.waitGone("planter", 30*time.Second)

	d.write("victim.yaml", pod("victim",
		`[{name: data, hostPath: {path: `+allowed+`/link, type: Directory}}]`, `[{name: data, mountPath: /data}]`))
	d.write("creator.yaml", pod("creator",
		`[{name: data, hostPath: {path: `+allowed+`/tmplink/`+nonce+`, type: DirectoryOrCreate}}]`, `[{name: data, mountPath: /data}]`))
	d.write("keeper.yaml", pod("keeper",
		`[{name: all, hostPath: {path: `+allowed+`, type: Directory}}, {name: real, hostPath: {path: `+allowed+`/real/new, type: DirectoryOrCreate}}]`,
		`[{name: real, mountPath: /data}, {name: all, mountPath: /sub, subPath: made/here}]`))
	d.write("subvictim.yaml", pod("subvictim",
		`[{name: all, hostPath: {path: `+allowed+`, type: Directory}}]`, `[{name: all, mountPath: /data, subPath: link}]`))

	for _, name := range []string{"victim", "creator"} {
		p := d.waitPod(name, 30*time.Second, configErrorFor("app"))
		if _, msg := waitingReason(p, "app"); !strings.Contains(msg, "is a symbolic link") || !strings.Contains(msg, "security.allowedHostPaths") {
			t.Errorf("%s: message %q: want it to name the link and the allowed host paths", name, msg)
		}
	}
	p := d.waitPod("subvictim", 30*time.Second, configErrorFor("app"))
	if _, msg := waitingReason(p, "app"); msg != `failed to prepare subPath for volumeMount "all" of container "app"` {
		t.Errorf("subvictim: message %q", msg)
	}
	if _, err := os.Lstat(filepath.Join("/tmp", nonce)); err == nil {
		t.Errorf("/tmp/%s was created on the host through the planted link", nonce)
	}
	d.waitPod("keeper", 30*time.Second, running)
	waitForLong(t, 10*time.Second, "the keeper's file in the allowed directory", func() bool {
		b, _ := os.ReadFile(filepath.Join(allowed, "real", "new", "hello"))
		return string(b) == "hello\n"
	})
	if st, err := os.Stat(filepath.Join(allowed, "made", "here")); err != nil || !st.IsDir() {
		t.Errorf("the subPath below the allowed hostPath was not created: %v", err)
	}

	for _, name := range []string{"victim", "creator", "keeper", "subvictim"} {
		d.remove(name + ".yaml")
		d.waitGone(name, 30*time.Second)
	}
	// Unmounting the staged binds must not have taken the host's files.
	if _, err := os.Stat(filepath.Join(allowed, "real", "new", "hello")); err != nil {
		t.Errorf("the allowed directory lost its files with the pod: %v", err)
	}
	waitForLong(t, 10*time.Second, "the pods' directories to go", func() bool {
		entries, _ := os.ReadDir(filepath.Join(d.data, "pods"))
		return len(entries) == 0
	})
	requireNothingMounted(t, d)
}

// Containers run under the runtime's default seccomp profile unless the
// pod asks for Unconfined, and a digest-pinned image with
// imagePullPolicy Never runs from the local store.
func TestContainerdSeccompAndDigestPin(t *testing.T) {
	d, _ := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	list, err := d.client.Images(context.Background())
	if err != nil || len(list.Images) != 1 {
		t.Fatalf("images: %+v %v", list, err)
	}
	pinned := "podvisor.test/busybox@" + list.Images[0].Digest
	marker := 1000000 + os.Getpid()%100000
	pod := func(name, image, securityContext string, sleep int) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  securityContext: {%s}
  containers:
  - {name: app, image: %q, imagePullPolicy: Never, command: ["sleep", "%d"]}
`, name, securityContext, image, sleep)
	}
	d.write("pinned.yaml", pod("pinned", pinned, "", marker))
	d.write("unconfined.yaml", pod("unconfined", testImage, "seccompProfile: {type: Unconfined}", marker+1))
	d.waitPod("pinned", 30*time.Second, running)
	d.waitPod("unconfined", 30*time.Second, running)
	for sleep, want := range map[int]string{marker: "2", marker + 1: "0"} {
		pid := pidOfCommand(t, "sleep", fmt.Sprint(sleep))
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(status), "\nSeccomp:\t"+want+"\n") {
			t.Errorf("sleep %d (pid %d): want Seccomp: %s in\n%s", sleep, pid, want, status)
		}
	}
	for _, name := range []string{"pinned", "unconfined"} {
		d.remove(name + ".yaml")
		d.waitGone(name, 30*time.Second)
	}
}

// pidOfCommand finds the host pid of the process whose argv is args.
func pidOfCommand(t *testing.T, args ...string) int {
	t.Helper()
	want := []byte(strings.Join(args, "\x00") + "\x00")
	var found int
	waitForLong(t, 10*time.Second, fmt.Sprintf("a process running %v", args), func() bool {
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			if b, err := os.ReadFile(p); err == nil && bytes.Equal(b, want) {
				fmt.Sscan(filepath.Base(filepath.Dir(p)), &found)
				return true
			}
		}
		return false
	})
	return found
}

// The same subPath escape from a hub pod: refused alike, nothing created
// on the host.
func TestHubPodSubPathSymlinkEscape(t *testing.T) {
	nonce := hostNonce(t) // removed after the daemon is gone
	r := newFleetRig(t)
	d, _ := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	d.stop(syscall.SIGTERM)
	shareTestImage(t, d, fmt.Sprintf(", url: mqtt://%s, deviceId: e2e-vol, key: %s", r.addr, r.pubFile))
	d.start()
	r.apply(t, "e2e-vol", `apiVersion: v1
kind: Pod
metadata: {name: hubsub}
spec:
  terminationGracePeriodSeconds: 1
  volumes: [{name: work, emptyDir: {}}]
  initContainers:
  - name: plant
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["ln", "-s", "/", "/work/evil"]
    volumeMounts: [{name: work, mountPath: /work}]
  containers:
  - name: root
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sleep", "1000"]
    volumeMounts: [{name: work, mountPath: /host, subPath: evil}]
  - name: mkdir
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sleep", "1000"]
    volumeMounts: [{name: work, mountPath: /host, subPath: evil/tmp/`+nonce+`}]
`)
	p := d.waitPod("hubsub", 40*time.Second, configErrorFor("root", "mkdir"))
	if src := p.Annotations["podvisor.io/source"]; src != "hub" {
		t.Fatalf("source %q, want hub", src)
	}
	if _, msg := waitingReason(p, "root"); msg != `failed to prepare subPath for volumeMount "work" of container "root"` {
		t.Errorf("message %q", msg)
	}
	if _, err := os.Lstat(filepath.Join("/tmp", nonce)); err == nil {
		t.Errorf("/tmp/%s was created on the host through the planted link", nonce)
	}
	if _, err := r.hub.Delete("e2e-vol", "default", "hubsub"); err != nil {
		t.Fatal(err)
	}
	d.waitGone("hubsub", 30*time.Second)
	waitForLong(t, 10*time.Second, "the pod's directory to go", func() bool {
		_, err := os.Stat(filepath.Join(d.data, "pods", string(p.UID)))
		return os.IsNotExist(err)
	})
	requireNothingMounted(t, d)
}
