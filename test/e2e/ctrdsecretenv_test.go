package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// A containerd pod's environment from a Secret (a random marker, also
// expanded into its command) never reaches the disk: the container sees
// it, its PID 1 is its own command (podvisor-shim --exec-env exec'd it),
// exec sees the same environment, before and after a daemon restart; no
// file of containerd's (meta.db included) nor under the data directory
// holds it but the environment file on the private tmpfs, which goes with
// the pod.
func TestContainerdSecretEnvOffDisk(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	marker := "pv-ctrd-env-" + randomHex(t, 16)
	d.write("secret.yaml", fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {pw: %s, user: u-%s}\n", marker, marker))
	d.write("sec.yaml", `apiVersion: v1
kind: Pod
metadata: {name: sec}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sh", "-c", "exec sleep 1000", "$(PW)"]
    envFrom:
    - {prefix: DB_, secretRef: {name: db}}
    env:
    - {name: PW, valueFrom: {secretKeyRef: {name: db, key: pw}}}
    - {name: DSN, value: "db://$(PW)@here"}
    - {name: MODE, value: plain}
  - name: nonroot
    image: `+testImage+`
    imagePullPolicy: Never
    args: ["sleep", "1000"]
    securityContext: {runAsUser: 1000, runAsGroup: 1000, readOnlyRootFilesystem: true}
    env:
    - {name: PW, valueFrom: {secretKeyRef: {name: db, key: pw}}}
`)
	ready := func(restarts int32) func(p *v1.Pod) bool {
		return func(p *v1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) == 2 && cs[0].State.Running != nil && cs[0].RestartCount == restarts &&
				cs[1].State.Running != nil && cs[1].RestartCount == restarts
		}
	}
	d.waitPod("sec", 30*time.Second, ready(0))
	check := func(when string) {
		t.Helper()
		// A container of another user, read-only root, the image's
		// entrypoint (none) with args: its user reads the file.
		out, errOut, code := d.cli("exec", "sec", "-c", "nonroot", "--", "sh", "-c", `echo "$PW|$(id -u)|$(cat /proc/1/cmdline | tr '\0' ' ')"`)
		if want := marker + "|1000|sleep 1000 \n"; code != 0 || out != want {
			t.Fatalf("%s: exec in nonroot: exit %d, %q (%s)", when, code, redact(out, marker), errOut)
		}
		out, errOut, code = d.cli("exec", "sec", "-c", "main", "--", "sh", "-c", `echo "$PW|$DB_user|$DSN|$MODE"`)
		if want := marker + "|u-" + marker + "|db://" + marker + "@here|plain\n"; code != 0 || out != want {
			t.Fatalf("%s: exec: exit %d, %q (%s)", when, code, redact(out, marker), errOut)
		}
		// PID 1 is the command itself, with the whole environment.
		cmdline, _, _ := d.cli("exec", "sec", "-c", "main", "--", "cat", "/proc/1/cmdline")
		if cmdline != "sleep\x001000\x00" {
			t.Fatalf("%s: PID 1 is %q, want sleep 1000", when, redact(cmdline, marker))
		}
		environ, _, _ := d.cli("exec", "sec", "-c", "main", "--", "cat", "/proc/1/environ")
		pid1 := strings.Split(strings.TrimSuffix(environ, "\x00"), "\x00")
		for _, kv := range []string{"PW=" + marker, "DB_user=u-" + marker, "DB_pw=" + marker, "DSN=db://" + marker + "@here", "MODE=plain"} {
			if !slices.Contains(pid1, kv) {
				t.Fatalf("%s: PID 1's environment lacks %s", when, redact(kv, marker))
			}
		}
		// exec's environment is the container's (sh, which exec'd PID 1,
		// keeps no order and adds its own).
		execEnv, _, _ := d.cli("exec", "sec", "-c", "main", "--", "env")
		var want []string
		for _, kv := range pid1 {
			if !strings.HasPrefix(kv, "PWD=") && !strings.HasPrefix(kv, "SHLVL=") { // sh's own
				want = append(want, kv)
			}
		}
		got := strings.Split(strings.TrimSuffix(execEnv, "\n"), "\n")
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("%s: exec's environment %q, PID 1's %q", when, redact(strings.Join(got, " "), marker), redact(strings.Join(want, " "), marker))
		}
	}
	check("running")
	envFiles := func() []string {
		files, _ := filepath.Glob(filepath.Join(d.data, "private", "ctrd-*.env"))
		return files
	}
	if f := envFiles(); len(f) != 2 {
		t.Fatalf("environment files %v, want two", f)
	}
	offDisk := func(when string) {
		t.Helper()
		n := 0
		for _, root := range []string{ctrd.Dir, d.data} {
			// Mounts under the roots (tmpfs, containers' root file
			// systems) are left out; what lies on the disk is read.
			read, found := filesHolding(t, root, map[string]string{"the Secret's value": marker})
			n += read
			for _, f := range found {
				t.Errorf("%s: in clear on disk: %s", when, f)
			}
		}
		metaDB, _ := filepath.Glob(filepath.Join(ctrd.Dir, "*", "io.containerd.metadata.v1.bolt", "meta.db"))
		if len(metaDB) != 1 {
			t.Fatalf("%s: containerd's meta.db not found under %s", when, ctrd.Dir)
		}
		if data, _ := os.ReadFile(metaDB[0]); !bytes.Contains(data, []byte("MODE=plain")) {
			t.Fatalf("%s: %s lacks the container's plain env: the search proves little", when, metaDB[0])
		}
		if strings.Contains(d.log.String(), marker) {
			t.Fatalf("%s: the Secret's value in the daemon's log", when)
		}
		t.Logf("%s: %d files searched under %s and %s", when, n, ctrd.Dir, d.data)
	}
	offDisk("running")

	// A daemon restart: the container is adopted, exec keeps its env.
	d.stop(syscall.SIGKILL)
	d.start()
	d.waitPod("sec", 30*time.Second, ready(0))
	check("after a daemon restart")
	offDisk("after a daemon restart")

	d.remove("sec.yaml")
	d.waitGone("sec", 30*time.Second)
	waitFor(t, "the deleted pod's environment file to go", func() bool { return len(envFiles()) == 0 })
}
