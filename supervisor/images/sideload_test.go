package images

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime"
)

func writeArchive(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// newSideloader is the component's sideloader over a fresh directory,
// its state loaded as run loads it.
func newSideloader(t *testing.T, store *fakeStore, dir string) (*Images, *sideloader) {
	t.Helper()
	m := New(store, nil, Options{Dir: dir, Log: slog.Default()})
	m.sideload.load()
	return m, m.sideload
}

// An archive is imported once, and again when it changes; what was
// imported is remembered across restarts.
func TestSideloadImportsEachVersionOnce(t *testing.T) {
	dir, store := t.TempDir(), &fakeStore{}
	m, s := newSideloader(t, store, dir)
	app := writeArchive(t, dir, "app.tar", "v1")
	writeArchive(t, dir, ".imported.json.tmp", "hidden files are not archives")
	s.scan()
	s.scan()
	if got := store.importedPaths(); !slices.Equal(got, []string{app}) {
		t.Fatalf("imported %v, want app.tar once", got)
	}
	select {
	case <-m.Arrived():
	default:
		t.Fatal("no arrival after a side-load")
	}
	writeArchive(t, dir, "app.tar", "version 2")
	s.scan()
	if got := store.importedPaths(); len(got) != 2 {
		t.Fatalf("a changed archive was not imported again: %v", got)
	}
	_, again := newSideloader(t, store, dir)
	again.scan()
	if got := store.importedPaths(); len(got) != 2 {
		t.Fatalf("a restarted side-loader imported again: %v", got)
	}
}

// A rejected archive is listed until it is replaced; one whose runtime is
// away is tried again, not rejected.
func TestSideloadFailures(t *testing.T) {
	dir, store := t.TempDir(), &fakeStore{}
	m, s := newSideloader(t, store, dir)
	writeArchive(t, dir, "bad.tar", "junk")
	store.setImportErr(errors.New("not an archive"))
	s.scan()
	_, failed, err := m.List()
	if err != nil || len(failed) != 1 || failed[0] != (Failure{File: filepath.Join(dir, "bad.tar"), Error: "not an archive"}) {
		t.Fatalf("failures %+v, %v", failed, err)
	}
	writeArchive(t, dir, "away.tar", "fine")
	store.setImportErr(fmt.Errorf("importing: %w", runtime.ErrUnreachable))
	s.scan()
	if _, failed, _ := m.List(); len(failed) != 1 {
		t.Fatalf("an unreachable runtime's archive was rejected: %+v", failed)
	}
	store.setImportErr(nil)
	s.scan()
	if got := store.importedPaths(); !slices.Equal(got, []string{filepath.Join(dir, "away.tar")}) {
		t.Fatalf("imported %v, want away.tar retried and bad.tar left", got)
	}
	writeArchive(t, dir, "bad.tar", "a real archive now")
	s.scan()
	if _, failed, _ := m.List(); len(failed) != 0 {
		t.Fatalf("a replaced archive is still listed: %+v", failed)
	}
	os.Remove(filepath.Join(dir, "bad.tar"))
	s.consider("bad.tar")
	if _, seen := s.state["bad.tar"]; seen {
		t.Fatal("a removed archive is still remembered")
	}
}

// Started, the component imports what is already in the directory and
// tells the loop.
func TestStartImportsWhatIsThere(t *testing.T) {
	dir, store := t.TempDir(), &fakeStore{}
	app := writeArchive(t, dir, "app.tar", "v1")
	m := New(store, nil, Options{Dir: dir, Log: slog.Default(), Settle: time.Hour})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m.Start(ctx)
	select {
	case <-m.Arrived():
	case <-time.After(10 * time.Second):
		t.Fatal("no arrival from the archive present at start")
	}
	if got := store.importedPaths(); !slices.Equal(got, []string{app}) {
		t.Fatalf("imported %v", got)
	}
}
