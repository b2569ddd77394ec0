package process

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/podvisor/podvisor/supervisor/runtime"
	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

// On a hybrid host the shim also joins the container's mirror under the
// cgroup2 mount before it forks, and returns to the shims' mirror; with
// no Unified mount nothing is added.
func TestPlaceUnified(t *testing.T) {
	unified := t.TempDir()
	r := &Runtime{cgroups: runtime.Cgroups{Unified: unified, Shims: "pv/shims"}, log: slog.Default()}
	c := shim.Cgroup{Procs: []string{"/v1/memory/pv/pod1/app/cgroup.procs"}, Return: []string{"/v1/memory/pv/shims/cgroup.procs"}}
	r.placeUnified("pv/burstable/pod1/app", &c)
	want := filepath.Join(unified, "pv/burstable/pod1/app/cgroup.procs")
	if len(c.Procs) != 2 || c.Procs[1] != want {
		t.Fatalf("procs = %v, want the v1 one then %s", c.Procs, want)
	}
	if !slices.Contains(c.Return, filepath.Join(unified, "pv/shims/cgroup.procs")) {
		t.Fatalf("return = %v, want the shims' cgroup2 mirror in it", c.Return)
	}
	for _, d := range []string{"pv/burstable/pod1/app", "pv/shims"} {
		if st, err := os.Stat(filepath.Join(unified, d)); err != nil || !st.IsDir() {
			t.Fatalf("mirror %s not made: %v", d, err)
		}
	}

	r.cgroups.Unified = ""
	c = shim.Cgroup{Procs: []string{"/a"}, Return: []string{"/b"}}
	r.placeUnified("pv/burstable/pod1/app", &c)
	if len(c.Procs) != 1 || len(c.Return) != 1 {
		t.Fatalf("without a unified mount: %+v, want nothing added", c)
	}
}
