package manifest

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/prereq"
)

type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time           { return c.t }
func (c *fakeClock) advance(by time.Duration) { c.t = c.t.Add(by) }

// testDir is a manifest directory with one accepted pod in web.yaml, a
// fake clock and a captured log.
func testDir(t *testing.T) (*Dir, *fakeClock, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(goodPod), 0o644); err != nil {
		t.Fatal(err)
	}
	clock := &fakeClock{t: time.Unix(1000, 0)}
	var log bytes.Buffer
	d := &Dir{Path: dir, Now: clock.now, Confirm: 2 * time.Second,
		Log: slog.New(slog.NewTextHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	st, err := d.Load()
	if err != nil || len(st.Pods) != 1 || len(st.Invalid) != 0 {
		t.Fatalf("load: %+v, %v", st, err)
	}
	return d, clock, &log
}

// An editor or "cat >" truncates, pauses, then writes: the truncated read
// must not stop the pod, and the same content written back is no change.
func TestDirInPlaceRewriteKeepsPods(t *testing.T) {
	d, clock, _ := testDir(t)
	uid := d.state().Pods[0].UID
	path := filepath.Join(d.Path, "web.yaml")
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	if d.refresh("web.yaml", clock.now()) {
		t.Fatal("an empty read of a file that had pods changed the state at once")
	}
	if due, ok := d.due["web.yaml"]; !ok || !due.Equal(clock.now().Add(2*time.Second)) {
		t.Fatalf("the empty read must be re-read after Confirm; due = %v (%v)", due, ok)
	}
	clock.advance(time.Second)
	half := goodPod[:len(goodPod)/2]
	os.WriteFile(path, []byte(half), 0o644) // a slow writer, half-way
	if d.refresh("web.yaml", clock.now()) {
		t.Fatal("a half-written file changed the state at once")
	}
	clock.advance(time.Second)
	os.WriteFile(path, []byte(goodPod), 0o644)
	if d.refresh("web.yaml", clock.now()) {
		t.Fatal("the same content written back counts as a change")
	}
	clock.advance(time.Hour)
	st, _ := d.Load()
	if len(st.Pods) != 1 || st.Pods[0].UID != uid || len(st.Invalid) != 0 || len(d.due) != 0 {
		t.Fatalf("after the rewrite: %+v, due %v", st, d.due)
	}
}

// A file left empty keeps its pods: an empty read never deletes a running
// pod; it is reported invalid once it stayed empty for Confirm.
func TestDirEmptyFileKeepsPodsAndIsReported(t *testing.T) {
	d, clock, _ := testDir(t)
	os.Truncate(filepath.Join(d.Path, "web.yaml"), 0)
	d.refresh("web.yaml", clock.now())
	clock.advance(time.Second)
	if d.refresh("web.yaml", clock.now()) {
		t.Fatal("confirmed before Confirm passed")
	}
	clock.advance(time.Second)
	if !d.refresh("web.yaml", clock.now()) {
		t.Fatal("an empty file that stayed empty was never reported")
	}
	st := d.state()
	if len(st.Pods) != 1 || len(st.Invalid) != 1 || st.Invalid[0].Err != errEmpty {
		t.Fatalf("state = %+v", st)
	}
	if !st.Invalid[0].Since.Equal(clock.now()) {
		t.Fatalf("since = %v", st.Invalid[0].Since)
	}
}

// A removal, or a rewrite that drops a pod, counts only once confirmed;
// a new file is back in time counts as no removal at all.
func TestDirRemovalIsConfirmed(t *testing.T) {
	d, clock, _ := testDir(t)
	path := filepath.Join(d.Path, "web.yaml")
	os.Rename(path, path+"~") // an editor moving the original aside
	if st, _ := d.Load(); len(st.Pods) != 1 {
		t.Fatal("a file moved away stopped its pod at once")
	}
	clock.advance(time.Second)
	os.WriteFile(path, []byte(goodPod), 0o644)
	d.Load()
	clock.advance(time.Hour)
	if st, _ := d.Load(); len(st.Pods) != 1 || len(d.due) != 0 {
		t.Fatalf("after the editor's save: %+v", st)
	}
	os.Remove(path)
	d.Load()
	clock.advance(2 * time.Second)
	if st, _ := d.Load(); len(st.Pods) != 0 || len(st.Invalid) != 0 {
		t.Fatalf("a confirmed removal must remove the pod: %+v", st)
	}
}

func TestDirSkipsNonRegularFiles(t *testing.T) {
	d, clock, log := testDir(t)
	fifo := filepath.Join(d.Path, "fifo.yaml")
	if err := unix.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	unix.Mkfifo(filepath.Join(other, "target"), 0o644)
	os.Symlink(filepath.Join(other, "target"), filepath.Join(d.Path, "link-to-fifo.yaml"))
	os.WriteFile(filepath.Join(other, "pod.yaml"), []byte(strings.Replace(goodPod, "name: web", "name: linked", 1)), 0o644)
	os.Symlink(filepath.Join(other, "pod.yaml"), filepath.Join(d.Path, "linked.yaml"))

	done := make(chan State, 1)
	go func() { st, _ := d.Load(); done <- st }()
	var st State
	select {
	case st = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Load blocked: a FIFO in the manifest directory was opened")
	}
	if len(st.Pods) != 2 || len(st.Invalid) != 0 {
		t.Fatalf("want web and the linked pod, nothing invalid: %+v", st)
	}
	for _, name := range []string{"fifo.yaml", "link-to-fifo.yaml"} {
		if !strings.Contains(log.String(), "not a regular file") || !strings.Contains(log.String(), name) {
			t.Fatalf("no log line naming %s:\n%s", name, log)
		}
	}
	n := strings.Count(log.String(), "skipped")
	clock.advance(time.Minute)
	d.Load()
	if strings.Count(log.String(), "skipped") != n {
		t.Fatalf("a skipped file is logged again on every resync:\n%s", log)
	}
}

// An oversized file is refused from its size, never read: the process
// reads no more than the small files beside it (a read, even one cut at
// the limit, would be over 10 MiB of the sparse file's zeros).
func TestDirRefusesOversizedFileUnread(t *testing.T) {
	d, clock, _ := testDir(t)
	big := filepath.Join(d.Path, "big.yaml")
	f, err := os.Create(big)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(4 << 30); err != nil {
		f.Close()
		prereq.Missing(t, "sparse files: %v", err)
	}
	f.Close()
	before := bytesRead(t)
	st, _ := d.Load()
	clock.advance(time.Hour)
	if n := bytesRead(t) - before; n > 1<<20 {
		t.Fatalf("refusing a 4 GiB file read %d bytes: it was read", n)
	}
	if len(st.Pods) != 1 || len(st.Invalid) != 1 || !strings.Contains(st.Invalid[0].Err.Error(), "larger than") ||
		!strings.HasSuffix(st.Invalid[0].File, "big.yaml") {
		t.Fatalf("state = %+v", st)
	}
}

// bytesRead is how many bytes the test process has read so far, by any
// thread (rchar in /proc/self/io).
func bytesRead(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		prereq.Missing(t, "I/O accounting: %v", err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("/proc/self/io: %q", line)
			}
			return n
		}
	}
	t.Fatalf("/proc/self/io has no rchar:\n%s", data)
	return 0
}
