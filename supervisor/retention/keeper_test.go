package retention

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/supervisor/lifecycle"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// history is a runtime that keeps instances: Kept lists them, Remove
// forgets them unless failing names them. Only Kept and Remove are called.
type history struct {
	runtime.Runtime
	kept    []runtime.Kept
	failing map[string]bool
	removed []string
}

func (h *history) Kept(prefix string) []runtime.Kept {
	var out []runtime.Kept
	for _, k := range h.kept {
		if strings.HasPrefix(k.InstanceID, prefix) {
			out = append(out, k)
		}
	}
	return out
}

func (h *history) Remove(id string) error {
	if h.failing[id] {
		return errors.New("busy")
	}
	h.removed = append(h.removed, id)
	h.kept = slices.DeleteFunc(h.kept, func(k runtime.Kept) bool { return k.InstanceID == id })
	return nil
}

// forgetful is a runtime that keeps nothing once an instance ends: it is
// never asked to list or remove any.
type forgetful struct{ runtime.Runtime }

type registry []runtime.Runtime

func (r registry) All() []runtime.Runtime { return r }

// pods knows the instances of some pods, as the lifecycle machine does.
type pods map[types.UID]*v1.Pod

func (p pods) Instance(uid types.UID) *lifecycle.Instance {
	if pod := p[uid]; pod != nil {
		return &lifecycle.Instance{Pod: pod}
	}
	return nil
}

func pod(name string, uid types.UID) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: uid}}
}

func newKeeper(t *testing.T, perContainer, device int) (*Keeper, string) {
	dir := t.TempDir()
	return New(Options{DataDir: dir, MaxDeadPerContainer: perContainer, MaxDeadContainers: device,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}), dir
}

// touch creates files (and their directories) below dir.
func touch(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		p := filepath.Join(dir, n)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// files lists the regular files below dir, relative to it.
func files(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	sort.Strings(out)
	return out
}

func TestLogLayout(t *testing.T) {
	k, dir := newKeeper(t, 1, 0)
	p := pod("web", "u1")
	if got, want := k.PodLogDir(p), filepath.Join(dir, "logs", "default_web_u1"); got != want {
		t.Errorf("PodLogDir = %s, want %s", got, want)
	}
	if got, want := k.LogPath(p, "app", 3), filepath.Join(dir, "logs", "default_web_u1", "app", "3.log"); got != want {
		t.Errorf("LogPath = %s, want %s", got, want)
	}
}

func TestTrimContainerKeepsTheAttemptAboutToStartAndThoseBefore(t *testing.T) {
	k, dir := newKeeper(t, 1, 0)
	rt := &history{failing: map[string]bool{"u1_app_0": true}, kept: []runtime.Kept{
		{InstanceID: "u1_app_0"}, {InstanceID: "u1_app_1"}, {InstanceID: "u1_app_2"},
		{InstanceID: "u1_side_0"}, {InstanceID: "u2_app_0"}, // other containers: untouched
	}}
	touch(t, dir, "logs/default_web_u1/app/0.log", "logs/default_web_u1/app/0.log.1", "logs/default_web_u1/app/1.log",
		"logs/default_web_u1/app/2.log", "logs/default_web_u1/side/0.log", "logs/default_other_u2/app/0.log")

	k.TrimContainer(registry{&forgetful{}, rt}, pod("web", "u1"), "app", 3)

	// Attempt 3 is about to start: it and attempt 2 stay. A removal
	// that fails is only logged.
	if want := []string{"u1_app_1"}; !slices.Equal(rt.removed, want) {
		t.Errorf("removed %v, want %v", rt.removed, want)
	}
	want := []string{"logs/default_other_u2/app/0.log", "logs/default_web_u1/app/2.log", "logs/default_web_u1/side/0.log"}
	if got := files(t, dir); !slices.Equal(got, want) {
		t.Errorf("files left %v, want %v", got, want)
	}
}

func TestTrimDevice(t *testing.T) {
	at := func(s int) time.Time { return time.Date(2026, 1, 1, 0, 0, s, 0, time.UTC) }
	kept := func() []runtime.Kept {
		return []runtime.Kept{
			{InstanceID: "u1_app_0", Finished: at(1)},
			{InstanceID: "u1_app_1", Finished: at(2)},
			{InstanceID: "u1_app_2", Finished: at(5)}, // u1/app's newest: kept
			{InstanceID: "u9_app_0", Finished: at(0)}, // a pod no longer known
			{InstanceID: "u9_app_1", Finished: at(6)},
			{InstanceID: "u1_side_0"}, // running
		}
	}
	logs := []string{"logs/default_web_u1/app/0.log", "logs/default_web_u1/app/1.log", "logs/default_web_u1/app/2.log"}
	known := pods{"u1": pod("web", "u1")}

	for _, tc := range []struct {
		name        string
		bound       int
		failing     string
		wantRemoved []string
		wantLogs    []string
	}{
		{name: "no bound", bound: 0, wantLogs: logs},
		{name: "within the bound", bound: 5, wantLogs: logs},
		{name: "two over, oldest first", bound: 3, wantRemoved: []string{"u9_app_0", "u1_app_0"}, wantLogs: logs[1:]},
		{name: "a failed removal does not count", bound: 3, failing: "u1_app_0",
			wantRemoved: []string{"u9_app_0", "u1_app_1"}, wantLogs: []string{logs[0], logs[2]}},
		{name: "newest stay", bound: 1, wantRemoved: []string{"u9_app_0", "u1_app_0", "u1_app_1"}, wantLogs: logs[2:]},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, dir := newKeeper(t, 1, tc.bound)
			touch(t, dir, logs...)
			rt := &history{kept: kept(), failing: map[string]bool{tc.failing: true}}
			k.TrimDevice(registry{&forgetful{}, rt}, known)
			if !slices.Equal(rt.removed, tc.wantRemoved) {
				t.Errorf("removed %v, want %v", rt.removed, tc.wantRemoved)
			}
			if got := files(t, dir); !slices.Equal(got, tc.wantLogs) {
				t.Errorf("logs left %v, want %v", got, tc.wantLogs)
			}
		})
	}
}

func TestTrimDeviceWithoutBoundAsksNoRuntime(t *testing.T) {
	k, _ := newKeeper(t, 1, 0)
	var none *asked
	k.TrimDevice(none, pods{}) // would panic if asked
}

// asked panics when listed: the runtimes must not be needed.
type asked struct{}

func (*asked) All() []runtime.Runtime { panic("runtimes listed") }

func TestRemovePodLogs(t *testing.T) {
	k, dir := newKeeper(t, 1, 0)
	touch(t, dir, "logs/default_web_u1/app/0.log", "logs/other_renamed_u1/app/0.log", "logs/default_web_u2/app/0.log")
	k.RemovePodLogs("u1")
	if got, want := files(t, dir), []string{"logs/default_web_u2/app/0.log"}; !slices.Equal(got, want) {
		t.Errorf("files left %v, want %v", got, want)
	}
}
