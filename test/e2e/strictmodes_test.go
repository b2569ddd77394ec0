package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// nobody is the unprivileged user the tests write manifests as.
const nobody = 65534

// asNobody writes content to path as uid and gid 65534, through a rename
// as configuration tools do.
func asNobody(t *testing.T, path, content string) {
	t.Helper()
	cmd := exec.Command("sh", "-c", `cat > "$1.tmp" && mv "$1.tmp" "$1"`, "sh", path)
	cmd.Stdin = strings.NewReader(content)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing %s as uid %d: %v\n%s", path, nobody, err, out)
	}
}

// openToNobody lets uid 65534 reach the daemon's directory: t.TempDir's
// directories are 0700. Root keeps them; 0755 is trusted.
func openToNobody(t *testing.T, d *daemon) {
	for _, p := range []string{filepath.Dir(d.dir), d.dir, d.manifests} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func invalid(p *v1.Pod) bool { return p.Status.Reason == "Invalid" }

// The report: a daemon started on a root-owned manifest directory, made
// world-writable later (chmod 1777), ran as root what an unprivileged
// user wrote there, and what that user linked in. Both are refused now,
// shown Invalid with the reason; a pod already running from a file that
// turns untrusted keeps running and says why.
func TestManifestsOthersCouldWriteAreRefused(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	openToNobody(t, d)
	d.start()
	d.write("web.yaml", processPod("web", "Always", 2, "exec sleep 1000"))
	web := d.waitPod("web", 20*time.Second, running)
	stillWeb := func() {
		t.Helper()
		p := d.waitPod("web", 5*time.Second, running)
		if p.UID != web.UID || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Fatalf("web was replaced or restarted: %s", describePod(p))
		}
	}

	// The directory turns world-writable after start-up; nobody drops a
	// pod that would run as root.
	if err := os.Chmod(d.manifests, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(d.dir, "ran")
	asNobody(t, filepath.Join(d.manifests, "intruder.yaml"), processPod("intruder", "Always", 2, "id -u > "+ran+"; exec sleep 1000"))
	bad := d.waitPod("intruder.yaml", 20*time.Second, invalid)
	if want := "refused, unread: the manifest directory " + d.manifests + " is writable by group or others (mode 1777"; !strings.Contains(bad.Status.Message, want) {
		t.Fatalf("message %q lacks %q", bad.Status.Message, want)
	}
	// The row and the verdict come from the read that would have started
	// the pod: it has not started, and will not.
	if out, _, _ := d.cli("get", "pods"); !strings.Contains(out, "intruder.yaml") || strings.Contains(out, "\nintruder ") {
		t.Fatalf("get pods:\n%s", out)
	}
	if exists(ran) {
		t.Fatalf("the intruder's pod ran: %q", readLines(ran))
	}
	if log := d.log.String(); !strings.Contains(log, "manifest rejected") || !strings.Contains(log, "intruder.yaml") {
		t.Fatalf("the refusal is not in the daemon log:\n%s", log)
	}
	// web.yaml is in that directory too: its pod keeps running, its row
	// says why.
	d.waitPod("web.yaml", 20*time.Second, invalid)
	stillWeb()

	// The directory fixed, nobody's own file linked in: refused.
	if err := os.Remove(filepath.Join(d.manifests, "intruder.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d.manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	d.waitGone("web.yaml", 20*time.Second)
	d.waitGone("intruder.yaml", 20*time.Second)
	home := filepath.Join(d.dir, "home")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	asNobody(t, filepath.Join(home, "pod.yaml"), processPod("linked", "Always", 2, "id -u > "+ran+"; exec sleep 1000"))
	if err := os.Symlink(filepath.Join(home, "pod.yaml"), filepath.Join(d.manifests, "linked.yaml")); err != nil {
		t.Fatal(err)
	}
	bad = d.waitPod("linked.yaml", 20*time.Second, invalid)
	if want := "directory " + home + " is owned by uid 65534, not root"; !strings.Contains(bad.Status.Message, want) {
		t.Fatalf("message %q lacks %q", bad.Status.Message, want)
	}
	if out, _, _ := d.cli("get", "pods"); strings.Contains(out, "\nlinked ") || exists(ran) {
		t.Fatalf("the linked pod ran:\n%s", out)
	}

	// A running pod's own file turns group-writable: it keeps running,
	// and its row and events say why.
	if err := os.Chmod(filepath.Join(d.manifests, "web.yaml"), 0o664); err != nil {
		t.Fatal(err)
	}
	bad = d.waitPod("web.yaml", 20*time.Second, invalid)
	if want := "file " + filepath.Join(d.manifests, "web.yaml") + " is writable by group or others (mode 0664)"; !strings.Contains(bad.Status.Message, want) {
		t.Fatalf("message %q lacks %q", bad.Status.Message, want)
	}
	stillWeb()
	out, _, _ := d.cli("describe", "pod", "web")
	for _, want := range []string{"FailedValidation", "refused, unread", "still running the last valid version"} {
		if !strings.Contains(out, want) {
			t.Fatalf("describe pod web lacks %q:\n%s", want, out)
		}
	}
}

// security.allowUntrustedManifests: what nobody writes into a world-
// writable directory runs, with a warning in the log.
func TestAllowUntrustedManifestsRunsThem(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	openToNobody(t, d)
	d.withConfig("security: {allowUntrustedManifests: true}\n")
	d.start()
	if err := os.Chmod(d.manifests, os.ModeSticky|0o777); err != nil {
		t.Fatal(err)
	}
	ran := filepath.Join(d.dir, "ran")
	asNobody(t, filepath.Join(d.manifests, "intruder.yaml"), processPod("intruder", "Always", 2, "id -u > "+ran+"; exec sleep 1000"))
	d.waitPod("intruder", 20*time.Second, running)
	waitFor(t, "the pod to write its uid", func() bool { return len(readLines(ran)) == 1 })
	if log := d.log.String(); !strings.Contains(log, "manifest read although the manifest directory") ||
		!strings.Contains(log, "security.allowUntrustedManifests") {
		t.Fatalf("no warning in the daemon log:\n%s", log)
	}
}
