package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
)

// runOnce runs "podvisor run" with the daemon's directories (overridden by
// extra flags, later flags win) and returns its stderr and exit code. It is
// for runs that must fail: one that keeps running is killed and fails the
// test.
func (d *daemon) runOnce(extra ...string) (string, int) {
	d.t.Helper()
	if d.config == "" {
		d.writeConfig()
	}
	args := append([]string{"run", "--manifests", d.manifests, "--data-dir", d.data, "--socket", d.socket, "--config", d.config}, extra...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	err := cmd.Run()
	if ctx.Err() != nil {
		d.t.Fatalf("podvisor run %v kept running for 30s; it should have refused to start:\n%s", extra, errb.String())
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		d.t.Fatal(err)
	}
	return errb.String(), code
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return st.Ino
}

// A second daemon on the same data directory, or on the same socket with
// another data directory, fails and leaves the first one's socket alone.
func TestSecondInstanceKeepsFirstSocket(t *testing.T) {
	d := newDaemon(t)
	d.start()
	ino := inode(t, d.socket)
	for _, tc := range []struct {
		name  string
		extra []string
		want  string
	}{
		{"same data dir", nil, "in use by another podvisor"},
		{"same data dir, other socket", []string{"--socket", filepath.Join(d.dir, "other.sock")}, "in use by another podvisor"},
		{"same socket, other data dir", []string{"--data-dir", filepath.Join(d.dir, "data2")}, "API socket " + d.socket + " is in use"},
	} {
		stderr, code := d.runOnce(tc.extra...)
		if code != 1 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 naming %q", tc.name, code, stderr, tc.want)
		}
		if got := inode(t, d.socket); got != ino {
			t.Fatalf("%s: the first daemon's socket was replaced", tc.name)
		}
		if _, err := d.client.Version(context.Background()); err != nil {
			t.Fatalf("%s: the first daemon no longer answers: %v", tc.name, err)
		}
	}
	if exists(filepath.Join(d.dir, "other.sock")) {
		t.Error("the refused daemon created its socket anyway")
	}
}

// A deleted API socket is re-created (the daemon watches its directory),
// with its mode, and answers again.
func TestDeletedSocketComesBack(t *testing.T) {
	d := newDaemon(t)
	d.start()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(d.socket)); err != nil {
		t.Fatal(err)
	}
	for round := 1; round <= 2; round++ {
		if err := os.Remove(d.socket); err != nil {
			t.Fatal(err)
		}
		timeout := time.After(10 * time.Second)
	wait:
		for {
			select {
			case ev := <-w.Events:
				// It is bound and given its mode elsewhere, then renamed
				// into place: once there, it listens.
				if ev.Name == d.socket && ev.Has(fsnotify.Create) {
					break wait
				}
			case err := <-w.Errors:
				t.Fatal(err)
			case <-timeout:
				t.Fatalf("round %d: socket %s was not re-created within 10s of its deletion", round, d.socket)
			}
		}
		if _, err := d.client.Version(context.Background()); err != nil {
			t.Fatalf("round %d: the re-created socket does not answer: %v", round, err)
		}
		st, err := os.Lstat(d.socket)
		if err != nil || st.Mode().Perm() != 0o660 || st.Mode()&os.ModeSocket == 0 {
			t.Fatalf("round %d: re-created socket: %v, %v; want a socket with mode 0660", round, st.Mode(), err)
		}
	}
}

// A data directory that others can write to, or that another user owns,
// is refused with an error naming it; nothing is started.
func TestUnsafeDataDirRefused(t *testing.T) {
	d := newDaemon(t)
	if err := os.Mkdir(d.data, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(d.data, 0o777) // past the umask
	stderr, code := d.runOnce()
	if code != 1 || !strings.Contains(stderr, d.data) || !strings.Contains(stderr, "writable by group or others") ||
		!strings.Contains(stderr, "-rwxrwxrwx") {
		t.Fatalf("world-writable data dir: exit %d, stderr %q", code, stderr)
	}
	if exists(d.socket) || exists(filepath.Join(d.data, "state.db")) {
		t.Fatal("a refused daemon created its socket or state")
	}
	t.Run("owned by another user", func(t *testing.T) {
		requireRoot(t) // to chown it
		d := newDaemon(t)
		if err := os.Mkdir(d.data, 0o700); err != nil {
			t.Fatal(err)
		}
		os.Chown(d.data, 4242, 4242)
		stderr, code := d.runOnce()
		if code != 1 || !strings.Contains(stderr, d.data) || !strings.Contains(stderr, "owned by another user") {
			t.Fatalf("foreign-owned data dir: exit %d, stderr %q", code, stderr)
		}
	})
	// A new data directory is made private.
	os.RemoveAll(d.data)
	d.start()
	if st, err := os.Stat(d.data); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("new data dir mode = %v, %v; want 0700", st.Mode(), err)
	}
}

// The state database (with its WAL files) is 0600 and container logs 0640
// at most, whatever the umask.
func TestStateAndLogFileModes(t *testing.T) {
	d := newDaemon(t)
	d.start()
	d.write("talk.yaml", processPod("talk", "Always", 1, "echo hello; exec sleep 1000"))
	d.waitPod("talk", 20*time.Second, running)
	for _, name := range []string{"state.db", "state.db-wal", "state.db-shm", "podvisor.lock"} {
		st, err := os.Stat(filepath.Join(d.data, name))
		if err != nil {
			if name == "state.db" {
				t.Fatal(err)
			}
			continue
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", name, st.Mode().Perm())
		}
	}
	logs, _ := filepath.Glob(filepath.Join(d.data, "logs", "default_talk_*", "main", "*.log"))
	if len(logs) == 0 {
		t.Fatal("no container log found")
	}
	for _, l := range logs {
		if st, err := os.Stat(l); err != nil || st.Mode().Perm()&^0o640 != 0 {
			t.Errorf("%s: mode %v (%v), want at most 0640", l, st.Mode().Perm(), err)
		}
	}
}

// A symbolic link planted where a container's next log will be written
// must not make the shim write through it: the host file stays untouched.
func TestLogSymlinkPlantedInLogDir(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("backoff: {initial: 100ms, max: 200ms}\n")
	gate := filepath.Join(d.dir, "gate")
	if err := unix.Mkfifo(gate, 0o600); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(d.dir, "host-file")
	if err := os.WriteFile(host, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	// Each attempt logs a line, then exits when the test says so.
	d.write("leak.yaml", processPod("leak", "Always", 1, "echo attempt-output; read x < "+gate+"; exit 1"))
	d.waitPod("leak", 20*time.Second, running)
	logs, _ := filepath.Glob(filepath.Join(d.data, "logs", "default_leak_*", "main", "*.log"))
	if len(logs) != 1 {
		t.Fatalf("want one log file, found %v", logs)
	}
	n, err := strconv.Atoi(strings.TrimSuffix(filepath.Base(logs[0]), ".log"))
	if err != nil {
		t.Fatalf("log file name %s: %v", logs[0], err)
	}
	next := filepath.Join(filepath.Dir(logs[0]), fmt.Sprintf("%d.log", n+1))
	if err := os.Symlink(host, next); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gate, []byte("go\n"), 0o600); err != nil { // the first attempt exits
		t.Fatal(err)
	}
	d.waitPod("leak", 20*time.Second, func(p *v1.Pod) bool {
		return running(p) && p.Status.ContainerStatuses[0].RestartCount == 1
	})
	// The second attempt has written its line once its log has it.
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(readFileString(next), "attempt-output") {
		if time.Now().After(deadline) {
			t.Fatalf("the second attempt's log %s never got its output (content %q)", next, readFileString(next))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := readFileString(host); got != "precious\n" {
		t.Fatalf("the host file behind the planted link was written: %q", got)
	}
	if st, err := os.Lstat(next); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("the log is not a regular file of its own: %v, %v", st.Mode(), err)
	}
}

func readFileString(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// waitEvent waits until a pod's events with text in their message have
// happened at least n times.
func (d *daemon) waitEvent(pod, text string, n int, timeout time.Duration) {
	d.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		evs, err := d.client.Events(context.Background(), "default", pod)
		seen := 0
		for _, e := range evs {
			if strings.Contains(e.Message, text) {
				seen += e.Count
			}
		}
		if seen >= n {
			return
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("pod %s: %d events with %q within %v, want %d (last error %v, events %+v)", pod, seen, text, timeout, n, err, evs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchAbsence records, through the API's watch, whether a pod is ever
// missing from the list until the returned function is called; that
// function reports it.
func (d *daemon) watchAbsence(name string) func() bool {
	ctx, cancel := context.WithCancel(context.Background())
	missing := make(chan bool, 1)
	go func() {
		var version uint64
		gone := false
		for {
			list, err := d.client.WatchPods(ctx, version)
			if err != nil {
				missing <- gone
				return
			}
			fmt.Sscan(list.ResourceVersion, &version)
			found := false
			for _, p := range list.Items {
				found = found || p.Name == name
			}
			gone = gone || !found
		}
	}()
	return func() bool { cancel(); return <-missing }
}

// A manifest rewritten in place (truncated, left empty a while, written
// again) keeps its pod: with the same content, the same process with no
// restart; with new content, the pod is replaced only once it is written.
func TestInPlaceRewriteKeepsPod(t *testing.T) {
	d := newDaemon(t)
	d.start()
	pidFile := filepath.Join(d.dir, "pid")
	manifest := processPod("web", "Always", 1, "echo $$ > "+pidFile+"; exec sleep 1000")
	d.write("web.yaml", manifest)
	before := d.waitPod("web", 20*time.Second, func(p *v1.Pod) bool { return running(p) && len(readLines(pidFile)) == 1 })
	pid := readLines(pidFile)[0]
	path := filepath.Join(d.manifests, "web.yaml")

	rewrite := func(round int, content string) {
		t.Helper()
		absent := d.watchAbsence("web")
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			t.Fatal(err)
		}
		// The pause: until the daemon has seen the file stay empty past
		// its confirmation wait, and said it keeps the pod.
		d.waitEvent("web", "still running the last valid version", round, 20*time.Second)
		if absent() {
			t.Fatalf("round %d: the pod was gone while its file was empty", round)
		}
		if _, err := f.WriteString(content); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	rewrite(1, manifest)
	// A second manifest written after the rewrite is read after it: once
	// its pod is listed, the rewrite has been acted on.
	d.write("marker.yaml", processPod("marker", "Always", 1, "exec sleep 1000"))
	d.waitPod("marker", 20*time.Second, running)
	after := d.waitPod("web", time.Second, func(*v1.Pod) bool { return true })
	b, a := before.Status.ContainerStatuses[0], after.Status.ContainerStatuses[0]
	if !running(after) || a.ContainerID != b.ContainerID || a.RestartCount != b.RestartCount || after.UID != before.UID {
		t.Fatalf("the rewrite replaced the pod: before %s, after %s", describePod(before), describePod(after))
	}
	n, _ := strconv.Atoi(pid)
	if got := readLines(pidFile); len(got) != 1 || got[0] != pid || !alive(n) {
		t.Fatalf("the container process changed: pid file %v, first pid %s alive %v", got, pid, alive(n))
	}

	rewrite(2, processPod("web", "Always", 1, "echo $$ > "+pidFile+".new; exec sleep 1000"))
	d.waitPod("web", 20*time.Second, func(p *v1.Pod) bool { return running(p) && p.UID != before.UID })
	for deadline := time.Now().Add(10 * time.Second); !exists(pidFile + ".new"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the updated pod did not run the updated command within 10s")
		}
	}
}

// FIFOs in the manifest directory (at startup, and added while running,
// directly or through a link) are skipped, never opened: the daemon keeps
// serving and later manifests still load.
func TestFIFOInManifestDirSkipped(t *testing.T) {
	d := newDaemon(t)
	if err := unix.Mkfifo(filepath.Join(d.manifests, "early.yaml"), 0o644); err != nil {
		t.Fatal(err)
	}
	d.start()
	unix.Mkfifo(filepath.Join(d.manifests, "late.yaml"), 0o644)
	unix.Mkfifo(filepath.Join(d.dir, "elsewhere"), 0o644)
	os.Symlink(filepath.Join(d.dir, "elsewhere"), filepath.Join(d.manifests, "linked.yaml"))
	d.write("good.yaml", processPod("good", "Always", 1, "exec sleep 1000"))
	d.waitPod("good", 20*time.Second, running)
	if _, err := d.client.Version(context.Background()); err != nil {
		t.Fatalf("the daemon stopped answering: %v", err)
	}
	d.stop(syscall.SIGTERM)
	for _, name := range []string{"early.yaml", "late.yaml", "linked.yaml"} {
		if !strings.Contains(d.log.String(), filepath.Join(d.manifests, name)) {
			t.Errorf("no log line names the skipped %s", name)
		}
	}
}

// A manifest over the size limit is refused from its size: a 256 MiB
// (sparse) file never enters the daemon's memory.
func TestOversizedManifestRefusedUnread(t *testing.T) {
	d := newDaemon(t)
	d.start()
	big := filepath.Join(d.manifests, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(256 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	d.write("good.yaml", processPod("good", "Always", 1, "exec sleep 1000"))
	d.waitPod("good", 20*time.Second, running)
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", d.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var n int
			fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB")), &n)
			if n > 128<<10 {
				t.Errorf("daemon peak RSS %d kB: the oversized manifest was read", n)
			}
		}
	}
	d.stop(syscall.SIGTERM)
	if !strings.Contains(d.log.String(), "larger than the 10485760 byte limit; not read") {
		t.Errorf("no log line refusing big.yaml by its size")
	}
}
