package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// A process pod's environment from a Secret (a random marker) never
// reaches the data directory's disk: the container, its postStart hook,
// its exec readiness probe and exec see it; no file under the data
// directory holds it (state.db and its WAL included), but the private
// specs on their tmpfs; nor do the daemon's log or describe. A daemon
// restart (adoption) and a keeper restart (the container restarted under
// a new keeper) keep exec's environment; the pod's deletion leaves no
// private spec.
func TestProcessPodSecretEnvOffDisk(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.start()
	marker := "pv-env-" + randomHex(t, 16)
	expected, seen, hook := filepath.Join(d.dir, "expected"), filepath.Join(d.dir, "seen"), filepath.Join(d.dir, "hook")
	if err := os.WriteFile(expected, []byte(marker), 0o600); err != nil {
		t.Fatal(err)
	}
	d.write("secret.yaml", fmt.Sprintf("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {pw: %s, user: u-%s}\n", marker, marker))
	d.write("sec.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: sec}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sh", "-c", "echo \"$PW $DB_user\" > %[1]s.tmp && mv %[1]s.tmp %[1]s; exec sleep 1000", "--pw=$(PW)"]
    envFrom:
    - {prefix: DB_, secretRef: {name: db}}
    env:
    - {name: PW, valueFrom: {secretKeyRef: {name: db, key: pw}}}
    - {name: DSN, value: "db://$(PW)@here"}
    - {name: MODE, value: plain}
    lifecycle:
      postStart: {exec: {command: ["sh", "-c", "echo \"$PW\" > %[2]s"]}}
    readinessProbe:
      exec: {command: ["sh", "-c", "test \"$PW\" = \"$(cat %[3]s)\""]}
      periodSeconds: 1
`, seen, hook, expected))
	d.waitPod("sec", 20*time.Second, func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
	})
	got := waitForValue(t, 10*time.Second, "the container's env written to "+seen,
		func() string { b, _ := os.ReadFile(seen); return strings.TrimSpace(string(b)) },
		func(s string) bool { return s != "" })
	if got != marker+" u-"+marker {
		t.Fatalf("the container's PW and DB_user: %q", redact(got, marker))
	}
	if b, _ := os.ReadFile(hook); strings.TrimSpace(string(b)) != marker {
		t.Fatalf("the postStart hook's PW: %q", redact(strings.TrimSpace(string(b)), marker))
	}
	execSees := func(when string) {
		t.Helper()
		out, errOut, code := d.cli("exec", "sec", "--", "sh", "-c", `echo "$PW|$DSN|$MODE"`)
		if want := marker + "|db://" + marker + "@here|plain\n"; code != 0 || out != want {
			t.Fatalf("%s exec: exit %d, %q (%s)", when, code, redact(out, marker), errOut)
		}
	}
	execSees("at first")
	offDisk := func(when string, instances int) {
		t.Helper()
		private := filepath.Join(d.data, "private")
		var st unix.Statfs_t
		if err := unix.Statfs(private, &st); err != nil || int64(st.Type) != unix.TMPFS_MAGIC {
			t.Fatalf("%s: %s is not a tmpfs (%v)", when, private, err)
		}
		specs, _ := filepath.Glob(filepath.Join(private, "*.json"))
		if len(specs) != instances {
			t.Fatalf("%s: private specs %v, want %d", when, specs, instances)
		}
		// The private tmpfs and the pods' volumes are mounts under the
		// data directory: filesHolding leaves them out.
		n, found := filesHolding(t, d.data, map[string]string{"the Secret's value": marker})
		for _, f := range found {
			t.Errorf("%s: in clear on disk: %s", when, f)
		}
		if n < 5 || !exists(filepath.Join(d.data, "state.db")) {
			t.Fatalf("%s: %d files searched under %s, state.db among them: the search proves little", when, n, d.data)
		}
		if strings.Contains(d.log.String(), marker) {
			t.Fatalf("%s: the Secret's value in the daemon's log", when)
		}
		if desc, _, _ := d.cli("describe", "pod", "sec"); strings.Contains(desc, marker) {
			t.Fatalf("%s: the Secret's value in describe", when)
		}
		t.Logf("%s: %d files under the data directory searched", when, n)
	}
	offDisk("running", 1)

	// A daemon restart: the container is adopted, exec keeps its env.
	d.stop(syscall.SIGKILL)
	d.start()
	d.waitPod("sec", 20*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].Ready && cs[0].RestartCount == 0
	})
	execSees("after a daemon restart")

	// A keeper restart: its container dies with it and restarts under a
	// new keeper, with the same env; the old instance's private spec goes.
	keepers := keeperPids(t, d)
	if len(keepers) != 1 {
		t.Fatalf("keepers: %v", keepers)
	}
	os.Remove(seen)
	syscall.Kill(keepers[0], syscall.SIGKILL)
	d.waitPod("sec", 30*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		return len(cs) == 1 && cs[0].Ready && cs[0].RestartCount == 1
	})
	waitFor(t, "the restarted container to write its env", func() bool { b, _ := os.ReadFile(seen); return len(b) > 0 })
	execSees("after a keeper restart")
	offDisk("after the restarts", 1)

	d.remove("sec.yaml")
	d.waitGone("sec", 20*time.Second)
	waitFor(t, "the deleted pod's private spec to go", func() bool {
		specs, _ := filepath.Glob(filepath.Join(d.data, "private", "*"))
		return len(specs) == 0
	})
}

// A keeper that knows no private spec (the previous release's, through
// the `shim` setting) does not start a container whose Secret env it
// cannot see: the start fails (StartError, "no command") and the
// container never runs; a container without Secrets runs under it as
// before.
func TestOlderKeeperRefusesSecretEnv(t *testing.T) {
	prev, _ := previousAndCurrent(t)
	d := newDaemon(t)
	d.withConfig("shim: " + prev.shim() + "\n")
	d.start()
	olderRefuses(t, d, prev, true)
}

// An older shim (process: {keeper: false}) fails on it too.
func TestOlderShimRefusesSecretEnv(t *testing.T) {
	prev, _ := previousAndCurrent(t)
	d := newDaemon(t)
	d.withConfig("shim: " + prev.shim() + "\nprocess: {keeper: false}\n")
	d.start()
	olderRefuses(t, d, prev, false)
}

func olderRefuses(t *testing.T, d *daemon, prev release, keeper bool) {
	ran := filepath.Join(d.dir, "ran")
	d.write("secret.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {pw: s3cret}\n")
	d.write("plain.yaml", processPod("plain", "Always", 1, "exec sleep 1000"))
	d.write("sec.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: sec}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sh", "-c", "echo \"$PW\" > %s; exec sleep 1000"]
    env:
    - {name: PW, valueFrom: {secretKeyRef: {name: db, key: pw}}}
`, ran))
	d.waitPod("plain", 20*time.Second, running)
	if keepers := keeperPids(t, d); keeper && len(keepers) != 1 {
		t.Fatalf("keepers: %v", keepers)
	} else if keeper {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", keepers[0])); exe != prev.shim() {
			t.Fatalf("the keeper runs %s, want the previous release's %s", exe, prev.shim())
		}
	}
	p := d.waitPod("sec", 20*time.Second, func(p *v1.Pod) bool {
		cs := p.Status.ContainerStatuses
		if len(cs) != 1 {
			return false
		}
		last := cs[0].LastTerminationState.Terminated
		if cs[0].State.Terminated != nil {
			last = cs[0].State.Terminated
		}
		return last != nil && last.Reason == "StartError"
	})
	cs := p.Status.ContainerStatuses[0]
	last := cs.LastTerminationState.Terminated
	if cs.State.Terminated != nil {
		last = cs.State.Terminated
	}
	if (keeper && !strings.Contains(last.Message, "no command")) || cs.State.Running != nil {
		t.Fatalf("sec under the older keeper: %+v", cs)
	}
	if exists(ran) {
		t.Fatal("the container ran under a keeper that cannot see its Secret")
	}
	t.Logf("the previous release's shim or keeper refused it: %s", last.Message)
}
