package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
)

// fullDigest is an image's digest in podvisor's containerd namespace.
func fullDigest(t *testing.T, ctrd *ctrdtest.Containerd, name string) string {
	t.Helper()
	ls, err := exec.Command("ctr", "-a", ctrd.Address, "-n", "podvisor", "images", "ls").Output()
	if err != nil {
		t.Fatalf("ctr images ls: %v", err)
	}
	m := regexp.MustCompile(regexp.QuoteMeta(name) + `\s+\S+\s+(sha256:[0-9a-f]{64})`).FindStringSubmatch(string(ls))
	if m == nil {
		t.Fatalf("no digest for %s in:\n%s", name, ls)
	}
	return m[1]
}

// The device owner side-loads a private image with a licence key in it.
// A hub pod, sent by podhub through its broker, that names it with
// imagePullPolicy Never, or by its digest, runs nothing: it waits in
// ErrImageNeverPull naming hub.images.shared, on the device, in its
// events and at the hub; the device here has the strictest policy
// (forbidPrivileged, allowedHostPaths), which did not stop it before.
// The owner's own pod reads the key, and a hub pod runs the local image
// the owner shares.
func TestHubPodCannotRunSideloadedImage(t *testing.T) {
	h := newPodhub(t)
	d, ctrd := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	d.stop(syscall.SIGTERM)
	_, hubConfig := h.enrol(t, "img-1")
	f, err := os.OpenFile(d.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	// The test image (podvisor.test/busybox:1) is shared; the vendor's is
	// not.
	fmt.Fprintf(f, "security: {forbidPrivileged: true, allowedHostPaths: [/var/lib/podvisor-e2e-none]}\n%s  images: {shared: [podvisor.test/busybox]}\n", hubConfig)
	f.Close()
	d.start()

	const key = "LICENCE-KEY-7f3a9c"
	const private = "podvisor.test/vendor-app:1"
	licence := filepath.Join(t.TempDir(), "licence")
	os.WriteFile(licence, []byte(key+"\n"), 0o644)
	if err := ociimage.WriteFile(filepath.Join(d.data, "images", "vendor.tar"),
		ociimage.Image{Name: private, Cmd: []string{"sh"}, Files: map[string]string{"licence": licence}}); err != nil {
		t.Fatal(err)
	}
	waitForLong(t, 60*time.Second, "podvisor images to list "+private+" as side-loaded", func() bool {
		out, _, _ := d.cli("images")
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == private {
				return f[len(f)-1] == "side-loaded"
			}
		}
		return false
	})
	digest := fullDigest(t, ctrd, private)

	// The owner's pod: its own image, its key.
	d.write("owner.yaml", `apiVersion: v1
kind: Pod
metadata: {name: owner}
spec:
  restartPolicy: Never
  containers:
  - {name: main, image: `+private+`, imagePullPolicy: Never, command: ["cat", "/bin/licence"]}
`)
	d.waitPod("owner", 60*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	if out, _, _ := d.cli("logs", "owner"); out != key+"\n" {
		t.Fatalf("the owner's pod printed %q, want its key", out)
	}

	hubPod := func(name, image string, marker int) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "cat /bin/licence; exec sleep %d"]
`, name, image, marker)
	}
	manifest := filepath.Join(t.TempDir(), "hub.yaml")
	os.WriteFile(manifest, []byte(hubPod("steal", private, 7351)+"---\n"+
		hubPod("steal-digest", "podvisor.test/vendor-app@"+digest, 7352)+"---\n"+
		hubPod("shared", testImage, 7353)), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "img-1"); code != 0 {
		t.Fatalf("podhub apply: %s", out)
	}

	const says = "a hub pod may not use it: it is a local image of this device, not pulled from a registry, and not in hub.images.shared"
	var refused []string // their UIDs
	for _, name := range []string{"steal", "steal-digest"} {
		p := d.waitPod(name, 60*time.Second, func(p *v1.Pod) bool { r, _ := waitingReason(p, "main"); return r == "ErrImageNeverPull" })
		if _, msg := waitingReason(p, "main"); !strings.Contains(msg, says) {
			t.Errorf("%s waits with %q, want it to say %q", name, msg, says)
		}
		refused = append(refused, string(p.UID))
		if p.Annotations["podvisor.io/source"] != "hub" {
			t.Fatalf("%s: source %q, want hub", name, p.Annotations["podvisor.io/source"])
		}
		out, _, _ := d.cli("describe", "pod", name)
		if !strings.Contains(strings.Join(strings.Fields(out), " "), "hub.images.shared") {
			t.Errorf("describe pod %s does not show the refusal:\n%s", name, out)
		}
	}
	d.waitPod("shared", 60*time.Second, running)
	waitForLong(t, 30*time.Second, "the hub's mirror of steal waiting in ErrImageNeverPull, naming hub.images.shared", func() bool {
		p, ok := h.pods(t, "img-1")["steal"]
		if !ok {
			return false
		}
		r, msg := waitingReason(&p, "main")
		return r == "ErrImageNeverPull" && strings.Contains(msg, "hub.images.shared")
	})

	for _, marker := range []string{"7351", "7352"} {
		if pids := withCommandArg(marker); len(pids) > 0 {
			t.Errorf("a refused hub pod runs: sleep %s, pids %v", marker, pids)
		}
	}
	waitForLong(t, 10*time.Second, "the shared image's hub pod's sleep 7353 on the host", func() bool { return len(withCommandArg("7353")) == 1 })
	// No container was made for the refused pods (containerd IDs begin
	// with the pod's UID); no log of a hub pod holds the key.
	for _, c := range ctrContainers(t, ctrd) {
		for _, uid := range refused {
			if strings.HasPrefix(c, uid) {
				t.Errorf("a refused hub pod has a container: %s", c)
			}
		}
	}
	for _, name := range []string{"steal", "steal-digest", "shared"} {
		if out, _, _ := d.cli("logs", name); strings.Contains(out, key) {
			t.Errorf("hub pod %s printed the owner's key: %q", name, out)
		}
	}
}

// The migration rule: a running hub pod is adopted after a daemon
// restart whatever its image, even one it may no longer use (here the
// owner stopped sharing it, as an upgrade finds images of unknown
// origin): nothing is killed for a missing label. When its container
// ends, the new one is checked, and refused.
func TestHubPodAdoptedWhateverItsImage(t *testing.T) {
	r := newFleetRig(t)
	d, _ := ctrdDaemon(t)
	killContainersAtCleanup(t, d)
	d.stop(syscall.SIGTERM)
	shareTestImage(t, d, fmt.Sprintf(", url: mqtt://%s, deviceId: e2e-adopt, key: %s", r.addr, r.pubFile))
	d.start()
	r.apply(t, "e2e-adopt", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: keep}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - {name: main, image: %s, imagePullPolicy: Never, command: ["sleep", "7361"]}
`, testImage))
	d.waitPod("keep", 60*time.Second, running)
	var pids []int
	waitForLong(t, 10*time.Second, "the hub pod's sleep 7361 on the host", func() bool {
		pids = withCommandArg("7361")
		return len(pids) == 1
	})

	d.stop(syscall.SIGTERM)
	config, err := os.ReadFile(d.config)
	if err != nil {
		t.Fatal(err)
	}
	unshared := strings.Replace(string(config), "shared: [", "shared: [podvisor.test/other, ", 1)
	unshared = strings.Replace(unshared, "podvisor.test/busybox]", "]", 1)
	if unshared == string(config) {
		t.Fatalf("no shared list to take the test image from in:\n%s", config)
	}
	os.WriteFile(d.config, []byte(unshared), 0o644)
	d.start()
	p := d.waitPod("keep", 30*time.Second, running)
	if now := withCommandArg("7361"); len(now) != 1 || now[0] != pids[0] || statusOf(p, "main").RestartCount != 0 {
		t.Fatalf("the running hub pod was not adopted as it ran: pids %v, then %v; %s", pids, now, describePod(p))
	}

	syscall.Kill(pids[0], syscall.SIGKILL)
	p = d.waitPod("keep", 60*time.Second, func(p *v1.Pod) bool { r, _ := waitingReason(p, "main"); return r == "ErrImageNeverPull" })
	if _, msg := waitingReason(p, "main"); !strings.Contains(msg, "hub.images.shared") {
		t.Fatalf("the restarted container waits with %q, want the refusal naming hub.images.shared", msg)
	}
}
