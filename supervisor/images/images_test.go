package images

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/eviction"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// fakeStore is a runtime that keeps images in memory.
type fakeStore struct {
	mu       sync.Mutex
	images   []runtime.Image
	imported []string // archive paths, in order
	removed  []string
	pruned   []runtime.PruneArgs
	// importErr, when set, is what Import fails with.
	importErr error
	gc        runtime.ImageGC
}

func (f *fakeStore) Images() ([]runtime.Image, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.images), nil
}

func (f *fakeStore) Import(path string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.importErr != nil {
		return nil, f.importErr
	}
	f.imported = append(f.imported, path)
	return []string{"example.com/" + filepath.Base(path)}, nil
}

func (f *fakeStore) RemoveImage(name string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, name)
	return nil
}

func (f *fakeStore) PruneImages(a runtime.PruneArgs) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pruned = append(f.pruned, a)
}

func (f *fakeStore) ImageGC() runtime.ImageGC   { return f.gc }
func (f *fakeStore) ImageFS() string            { return "/var/lib/images" }
func (f *fakeStore) ImageWaitReasons() []string { return []string{"ErrImagePull", "ErrImageNeverPull"} }
func (f *fakeStore) setImportErr(err error)     { f.mu.Lock(); f.importErr = err; f.mu.Unlock() }
func (f *fakeStore) importedPaths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.imported)
}
func (f *fakeStore) prunes() []runtime.PruneArgs {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.pruned)
}
func (f *fakeStore) removals() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.removed)
}

// fakeClock is a clock tests move by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

func newTest(t *testing.T, store runtime.Images) (*Images, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)}
	m := New(store, errors.New("no runtime keeps images"), Options{Dir: t.TempDir(), Log: slog.Default(), Now: clock.Now})
	return m, clock
}

func TestImportLetsWaitingContainersRetry(t *testing.T) {
	store := &fakeStore{}
	m, clock := newTest(t, store)
	names, err := m.Import("/data/app.tar")
	if err != nil || len(names) != 1 || names[0] != "example.com/app.tar" {
		t.Fatalf("import: %v %v", names, err)
	}
	select {
	case a := <-m.Arrived():
		if !a.At.Equal(clock.now) || strings.Join(a.Reasons, ",") != "ErrImagePull,ErrImageNeverPull" {
			t.Fatalf("arrival %+v", a)
		}
	default:
		t.Fatal("no arrival after an import")
	}
}

func TestImportNeedsAnAbsolutePath(t *testing.T) {
	store := &fakeStore{}
	m, _ := newTest(t, store)
	if _, err := m.Import("app.tar"); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("err = %v", err)
	}
	if len(store.importedPaths()) != 0 {
		t.Fatal("a relative path was imported")
	}
}

// Only the latest arrival waits for the loop.
func TestArrivalsSupersedeOlderOnes(t *testing.T) {
	m, clock := newTest(t, &fakeStore{})
	m.Import("/a.tar")
	clock.now = clock.now.Add(time.Minute)
	m.Import("/b.tar")
	a := <-m.Arrived()
	if !a.At.Equal(clock.now) {
		t.Fatalf("arrival at %v, want the latest %v", a.At, clock.now)
	}
	select {
	case a := <-m.Arrived():
		t.Fatalf("a second arrival %+v", a)
	default:
	}
}

func TestListAndRemove(t *testing.T) {
	store := &fakeStore{images: []runtime.Image{{Name: "busybox:1", Size: 42}}}
	m, _ := newTest(t, store)
	imgs, failed, err := m.List()
	if err != nil || len(imgs) != 1 || imgs[0].Name != "busybox:1" || len(failed) != 0 {
		t.Fatalf("list: %v %v %v", imgs, failed, err)
	}
	if err := m.Remove("busybox:1"); err != nil || !slices.Equal(store.removals(), []string{"busybox:1"}) {
		t.Fatalf("remove: %v %v", err, store.removals())
	}
	if m.FS() != "/var/lib/images" {
		t.Fatalf("image fs %q", m.FS())
	}
}

// Without a runtime that keeps images, requests say why and the rest does
// nothing.
func TestWithoutImagesRequestsSayWhy(t *testing.T) {
	m, _ := newTest(t, nil)
	if _, _, err := m.List(); err == nil || err.Error() != "no runtime keeps images" {
		t.Fatalf("list: %v", err)
	}
	if _, err := m.Import("/a.tar"); err == nil || err.Error() != "no runtime keeps images" {
		t.Fatalf("import: %v", err)
	}
	if err := m.Remove("a"); err == nil {
		t.Fatal("remove without images succeeded")
	}
	m.Collect(map[eviction.Signal]eviction.Observation{eviction.ImageFsAvailable: {Available: 1, Capacity: 100}})
	m.PruneUnused()
	m.Rescan()
	m.Start(context.Background())
	if m.FS() != "" {
		t.Fatalf("image fs %q", m.FS())
	}
	var none *Images // before the runtimes are set up
	if none.Arrived() != nil || none.FS() != "" {
		t.Fatal("a nil component is not inert")
	}
	none.Rescan()
	none.Collect(nil)
	none.PruneUnused()
}

// Above the high threshold the collector frees down to the low one.
func TestCollectFreesDownToTheLowThreshold(t *testing.T) {
	store := &fakeStore{gc: runtime.ImageGC{HighThresholdPercent: 85, LowThresholdPercent: 80, MinimumAge: 2 * time.Minute}}
	m, _ := newTest(t, store)
	m.Collect(map[eviction.Signal]eviction.Observation{eviction.ImageFsAvailable: {Available: 20, Capacity: 100}})
	if len(store.prunes()) != 0 {
		t.Fatalf("pruned at 80%% used: %v", store.prunes())
	}
	m.Collect(map[eviction.Signal]eviction.Observation{eviction.MemoryAvailable: {Available: 1, Capacity: 100}})
	if len(store.prunes()) != 0 {
		t.Fatal("pruned without an image file system observation")
	}
	m.Collect(map[eviction.Signal]eviction.Observation{eviction.ImageFsAvailable: {Available: 10, Capacity: 100}})
	if p := store.prunes(); len(p) != 1 || p[0] != (runtime.PruneArgs{Bytes: 10, MinAge: 2 * time.Minute}) {
		t.Fatalf("prunes %+v", p)
	}
	m.PruneUnused()
	if p := store.prunes(); len(p) != 2 || p[1] != (runtime.PruneArgs{All: true, MinAge: 2 * time.Minute}) {
		t.Fatalf("prunes %+v", p)
	}
}
