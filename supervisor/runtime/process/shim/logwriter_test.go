package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Links and hard links planted where the shim writes a log, or in place
// of the log's directories, never lead its writes to another file.
func TestOpenLogNeverWritesThroughLinks(t *testing.T) {
	root := t.TempDir()
	host := filepath.Join(t.TempDir(), "host")
	os.WriteFile(host, []byte("precious\n"), 0o644)
	hostDir := t.TempDir()

	podDir := filepath.Join(root, "logs", "default_web_uid")
	os.MkdirAll(filepath.Join(podDir, "app"), 0o750)
	os.Symlink(host, filepath.Join(podDir, "app", "0.log")) // the file
	os.Link(host, filepath.Join(podDir, "app", "1.log"))    // a hard link
	os.Symlink(hostDir, filepath.Join(podDir, "sidecar"))   // a directory
	for _, rel := range []string{"app/0.log", "app/1.log", "sidecar/0.log"} {
		path := filepath.Join(podDir, rel)
		w, err := openLog(path, 1<<20, 2)
		if err != nil {
			t.Fatalf("%s: %v", rel, err)
		}
		w.write("stdout", "F", []byte("container output"))
		w.close()
		st, err := os.Lstat(path)
		if err != nil || !st.Mode().IsRegular() {
			t.Fatalf("%s: not a regular file of its own: %v, %v", rel, st, err)
		}
		if data, _ := os.ReadFile(path); !strings.Contains(string(data), "container output") {
			t.Fatalf("%s: %q", rel, data)
		}
		if st.Mode().Perm() != 0o640 {
			t.Fatalf("%s: mode %v", rel, st.Mode().Perm())
		}
	}
	if data, _ := os.ReadFile(host); string(data) != "precious\n" {
		t.Fatalf("the host file was written: %q", data)
	}
	if entries, _ := os.ReadDir(hostDir); len(entries) != 0 {
		t.Fatalf("a log was made in the linked directory: %v", entries)
	}
}

// Rotation keeps working in the directory opened at the start, and a
// link planted at the next rotated name is not followed either.
func TestRotationStaysInItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pod", "app")
	host := filepath.Join(t.TempDir(), "host")
	os.WriteFile(host, []byte("precious\n"), 0o644)
	w, err := openLog(filepath.Join(dir, "0.log"), 100, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	for i := 0; i < 3; i++ {
		w.write("stdout", "F", []byte(strings.Repeat("x", 80)))
		if i == 0 {
			os.Remove(filepath.Join(dir, "0.log"))
			os.Symlink(host, filepath.Join(dir, "0.log"))
		}
	}
	if data, _ := os.ReadFile(host); string(data) != "precious\n" {
		t.Fatalf("the host file was written: %q", data)
	}
	// The planted link may be rotated along (renaming a link is
	// harmless); what is written to is always a file of its own.
	if st, err := os.Lstat(filepath.Join(dir, "0.log")); err != nil || !st.Mode().IsRegular() {
		t.Errorf("0.log: %v, %v", st, err)
	}
}

// Lines are split into partial records at MaxLine bytes exactly as a
// MaxLine-sized buffer split them, though the copy reads through a small
// one: a line that fits with its newline is one F record, a longer one is
// P records of MaxLine bytes and then the rest; output that ends without a
// newline is a last P record.
func TestCopyStreamSplitsLongLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pod", "c", "0.log")
	w, err := openLog(path, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := strings.Repeat("a", MaxLine-1), strings.Repeat("b", MaxLine), strings.Repeat("c", 2*MaxLine+100)
	w.copyStream("stdout", strings.NewReader(splitInput(a, b, c)))
	w.close()
	checkSplit(t, path, a, b, c)
}

// The keeper's copier splits lines as copyStream does, however the
// output arrives in reads.
func TestKeeperCopierSplitsLongLines(t *testing.T) {
	a, b, c := strings.Repeat("a", MaxLine-1), strings.Repeat("b", MaxLine), strings.Repeat("c", 2*MaxLine+100)
	in := splitInput(a, b, c)
	for _, chunk := range []int{1, 7, 512, MaxLine, 1 << 20} {
		path := filepath.Join(t.TempDir(), "pod", "c", "0.log")
		w, err := openLog(path, 0, 1)
		if err != nil {
			t.Fatal(err)
		}
		s := &stream{name: "stdout", logs: w}
		for rest := in; len(rest) > 0; {
			n := min(chunk, len(rest))
			s.lines([]byte(rest[:n]))
			rest = rest[n:]
		}
		if len(s.carry) > 0 { // EOF
			w.write("stdout", "P", s.carry)
		}
		w.close()
		checkSplit(t, path, a, b, c)
	}
}

func splitInput(a, b, c string) string {
	return "short\n" + a + "\n" + b + "\n" + c + "\n" + strings.Repeat("d", 700) + "\nend"
}

func checkSplit(t *testing.T, path, a, b, c string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rec := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		f := strings.SplitN(rec, " ", 4)
		got = append(got, f[2]+" "+f[3])
	}
	want := []string{"F short", "F " + a, "P " + b, "F ", "P " + c[:MaxLine], "P " + c[MaxLine:2*MaxLine], "F " + c[2*MaxLine:],
		"F " + strings.Repeat("d", 700), "P end"}
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("record %d: %.40q (%d bytes), want %.40q (%d bytes)", i, got[i], len(got[i]), want[i], len(want[i]))
		}
	}
}

// A stream that does not run dry (a container writing short lines without
// a pause) leaves the copier to the other streams, and to add.
func TestKeeperCopierSharesItselfAmongStreams(t *testing.T) {
	c, err := newCopier()
	if err != nil {
		t.Fatal(err)
	}
	open := func() *logWriter {
		w, err := openLog(filepath.Join(t.TempDir(), "pod", "c", "0.log"), 1<<20, 2)
		if err != nil {
			t.Fatal(err)
		}
		return w
	}
	busyLog, quietLog := open(), open()
	busy, producer, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		// Refilled long before the copier has written out a read's worth.
		chunk := []byte(strings.Repeat("y\n", 32<<10))
		for {
			if _, err := producer.Write(chunk); err != nil {
				return
			}
		}
	}()
	busyEnded := make(chan struct{})
	if err := c.add(busy, "stdout", busyLog, func() { close(busyEnded) }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		producer.Close()
		<-busyEnded
		busyLog.close()
	})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		busyLog.mu.Lock()
		size := busyLog.size
		busyLog.mu.Unlock()
		if size > 0 {
			break // the copier is at it
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy stream was not copied")
		}
	}
	ended := make(chan struct{})
	go func() {
		r, w, err := os.Pipe()
		if err != nil {
			panic(err)
		}
		w.WriteString("quiet\n")
		w.Close()
		if err := c.add(r, "stdout", quietLog, func() { close(ended) }); err != nil {
			panic(err)
		}
	}()
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("a stream that never runs dry kept the copier from another")
	}
	quietLog.close()
	data, err := os.ReadFile(quietLog.path)
	if err != nil || !strings.HasSuffix(string(data), " stdout F quiet\n") {
		t.Fatalf("quiet log %q, %v", data, err)
	}
}
