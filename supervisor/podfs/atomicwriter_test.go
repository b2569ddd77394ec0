package podfs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// volumeEntries are the names in a volume's directory, sorted.
func volumeEntries(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// dataDirs are the timestamped data directories in a volume.
func dataDirs(t *testing.T, dir string) []string {
	var out []string
	for _, n := range volumeEntries(t, dir) {
		if strings.HasPrefix(n, "..") && n != dataDirName && n != newDataDirName {
			out = append(out, n)
		}
	}
	return out
}

// The first write publishes a timestamped directory through ..data, with
// a link per top-level name and each file's mode, whatever the umask.
func TestAtomicWriteLayout(t *testing.T) {
	dir := t.TempDir()
	changed, err := atomicWrite(dir, map[string]fileProjection{
		"a":       {Data: []byte("A"), Mode: 0o644},
		"x/y/b":   {Data: []byte("B"), Mode: 0o400},
		"./c":     {Data: []byte("C"), Mode: 0o755},
		"x/other": {Data: nil, Mode: 0o600},
	}, nil)
	if err != nil || !changed {
		t.Fatalf("write: changed %v, %v", changed, err)
	}
	ts := dataDirs(t, dir)
	if len(ts) != 1 || !strings.HasPrefix(ts[0], "..20") {
		t.Fatalf("data directories %v", ts)
	}
	if got, want := volumeEntries(t, dir), []string{ts[0], dataDirName, "a", "c", "x"}; !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v", got, want)
	}
	for link, want := range map[string]string{dataDirName: ts[0], "a": "..data/a", "c": "..data/c", "x": "..data/x"} {
		if got, err := os.Readlink(filepath.Join(dir, link)); err != nil || got != want {
			t.Errorf("link %s -> %q (%v), want %q", link, got, err, want)
		}
	}
	for p, want := range map[string]os.FileMode{"a": 0o644, "x/y/b": 0o400, "c": 0o755, "x/other": 0o600} {
		st, err := os.Stat(filepath.Join(dir, p))
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want mode %o", p, st, err, want)
		}
	}
	if st, _ := os.Stat(filepath.Join(dir, ts[0])); st.Mode().Perm() != 0o755 {
		t.Errorf("data directory mode %o, want 755", st.Mode().Perm())
	}
	if got := readFile(t, filepath.Join(dir, "x", "y", "b")); got != "B" {
		t.Errorf("x/y/b %q", got)
	}
}

// An update swaps the data directory, removes the old one and the names
// no longer in the payload; the same payload again changes nothing.
func TestAtomicWriteUpdates(t *testing.T) {
	dir := t.TempDir()
	write := func(payload map[string]fileProjection) bool {
		t.Helper()
		changed, err := atomicWrite(dir, payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		return changed
	}
	write(map[string]fileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "b": {Data: []byte("1"), Mode: 0o644}, "d/e": {Data: []byte("1"), Mode: 0o644}})
	first := dataDirs(t, dir)
	if write(map[string]fileProjection{"a": {Data: []byte("1"), Mode: 0o644}, "b": {Data: []byte("1"), Mode: 0o644}, "d/e": {Data: []byte("1"), Mode: 0o644}}) {
		t.Fatal("the same payload rewrote the volume")
	}
	if got := dataDirs(t, dir); !slices.Equal(got, first) {
		t.Fatalf("data directories %v after no change, want %v", got, first)
	}
	if !write(map[string]fileProjection{"a": {Data: []byte("2"), Mode: 0o644}}) {
		t.Fatal("a changed payload was not written")
	}
	current, _ := os.Readlink(filepath.Join(dir, dataDirName))
	if got := dataDirs(t, dir); current == first[0] || !slices.Equal(got, sorted(first[0], current)) {
		t.Fatalf("data directories %v, want the new one %s and the one it replaced %v", got, current, first)
	}
	if got, want := volumeEntries(t, dir), append(sorted(first[0], current), dataDirName, "a"); !slices.Equal(got, want) {
		t.Fatalf("entries %v, want %v: dropped names removed", got, want)
	}
	if got := readFile(t, filepath.Join(dir, "a")); got != "2" {
		t.Fatalf("a = %q", got)
	}
	// A removed key alone is a change too.
	write(map[string]fileProjection{"a": {Data: []byte("2"), Mode: 0o644}, "b": {Data: []byte("x"), Mode: 0o644}})
	if !write(map[string]fileProjection{"a": {Data: []byte("2"), Mode: 0o644}}) {
		t.Fatal("dropping b was not a change")
	}
	if _, err := os.Lstat(filepath.Join(dir, "b")); !os.IsNotExist(err) {
		t.Fatalf("b left: %v", err)
	}
	// One generation back is kept, no more.
	if got := dataDirs(t, dir); len(got) != 2 {
		t.Fatalf("data directories %v, want 2", got)
	}
	// An empty payload empties the volume (an optional object deleted).
	write(map[string]fileProjection{})
	if got, want := volumeEntries(t, dir), append(dataDirs(t, dir), dataDirName); !slices.Equal(got, want) {
		t.Fatalf("entries %v after an empty payload, want %v", got, want)
	}
	// A link removed by hand is made again, though the data is current.
	if !write(map[string]fileProjection{"a": {Data: []byte("3"), Mode: 0o644}}) {
		t.Fatal("not written")
	}
	os.Remove(filepath.Join(dir, "a"))
	if !write(map[string]fileProjection{"a": {Data: []byte("3"), Mode: 0o644}}) {
		t.Fatal("a missing link made again is a change")
	}
	if got := readFile(t, filepath.Join(dir, "a")); got != "3" {
		t.Fatalf("a = %q", got)
	}
}

func TestAtomicWriteRefusesPaths(t *testing.T) {
	for p, want := range map[string]string{
		"":                         "must not be empty",
		"/abs":                     "must be relative path",
		"a/../b":                   "must not contain '..'",
		"..data":                   "must not start with '..'",
		strings.Repeat("n", 256):   "filenames must be less than or equal to 255 characters",
		strings.Repeat("n/", 2100): "must be less than or equal to 4096 characters",
	} {
		dir := t.TempDir()
		_, err := atomicWrite(dir, map[string]fileProjection{p: {Data: []byte("x"), Mode: 0o644}}, nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("path %.20q: error %v, want %q", p, err, want)
		}
		if entries := volumeEntries(t, dir); len(entries) != 0 {
			t.Errorf("path %.20q: wrote %v", p, entries)
		}
	}
}

// A reader looping over a volume's files while it is updated many times
// never sees a file half written, nor misses a file that exists in every
// version: each update is one rename, and the data a reader may have just
// resolved stays one update longer. The writer waits for a read to end
// between updates (any number of reads may overlap one), so that a read
// overlaps at most one swap however slowly the reader is scheduled.
func TestAtomicWriteReaderNeverSeesAPartialUpdate(t *testing.T) {
	dir := t.TempDir()
	const size = 16 << 10
	payload := func(i int) map[string]fileProjection {
		b := bytes.Repeat([]byte{byte('a' + i%26)}, size)
		return map[string]fileProjection{
			"stable":                   {Data: b, Mode: 0o644},
			"nested/file":              {Data: b, Mode: 0o644},
			"flip" + strconv.Itoa(i%2): {Data: b, Mode: 0o644}, // present in every other version
		}
	}
	if _, err := atomicWrite(dir, payload(0), nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	progress := make(chan struct{}, 1)
	stopped := make(chan struct{}) // the reader stopped, on an error
	var wg sync.WaitGroup
	var readErr error
	reads := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(stopped)
		for {
			for _, p := range []string{"stable", "nested/file"} {
				data, err := os.ReadFile(filepath.Join(dir, p))
				if err != nil {
					readErr = err
					return
				}
				if len(data) != size || bytes.Count(data, data[:1]) != size {
					readErr = errors.New(p + ": a partial or mixed file was read")
					return
				}
				reads++
				select {
				case progress <- struct{}{}:
				default:
				}
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	for i := 1; i <= 100; i++ {
		if _, err := atomicWrite(dir, payload(i), nil); err != nil {
			close(done)
			wg.Wait()
			t.Fatal(err)
		}
		select { // a read that ended before this write is no news
		case <-progress:
		default:
		}
		select {
		case <-progress: // a read that overlapped this write or came after
		case <-stopped:
		}
	}
	close(done)
	wg.Wait()
	if readErr != nil {
		t.Fatalf("after %d reads: %v", reads, readErr)
	}
	if got := dataDirs(t, dir); len(got) != 2 {
		t.Fatalf("data directories left: %v, want the current one and the one before", got)
	}
}

func sorted(s ...string) []string {
	slices.Sort(s)
	return s
}
