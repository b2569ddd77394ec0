// Package layers guards the direction of podvisor's import graph: every
// package belongs to one layer, and a layer imports only itself and the
// layers below it that it is allowed to. A new folder must be placed in a
// layer before it builds a test run.
package layers

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/podvisor/podvisor"

// layer is a set of folders (a folder holds its sub-folders unless a
// longer entry of another layer claims them).
type layer struct {
	name    string
	folders []string
}

// layers, top to bottom. The arrows the issue asks for:
// cmd → config, sync, supervisor → probes, cgroups → vocabulary.
var layers = []layer{
	{"cmd", []string{"cmd"}},
	{"config", []string{"config"}},
	// The device's side of sync: its link up to the hub and its outbox.
	{"uplink", []string{"sync/uplink", "sync/store"}},
	// The fleet side: podhub's packages. It imports nothing of the device.
	{"hub", []string{"sync/hub"}},
	// What both sides of sync speak: the wire protocol, enrolment
	// certificates, TLS settings, rate limits.
	{"wire", []string{"sync/protocol", "sync/seal", "sync/pki", "sync/throttle", "sync/tlsconfig"}},
	// The daemon's shell and its edges: local API, SQLite records,
	// logind, pressure observers.
	{"shell", []string{"supervisor", "supervisor/api", "supervisor/state", "supervisor/logind",
		"supervisor/pressure", "supervisor/safepath", "supervisor/nodeprotect", "supervisor/podfs",
		"supervisor/podcgroups", "supervisor/podview", "supervisor/hooks", "supervisor/retention",
		"supervisor/podprobes", "supervisor/desired", "supervisor/podobjects", "supervisor/devmetrics"}},
	// What runs containers, and the namespaces and process handles it uses.
	{"runtime", []string{"supervisor/runtime", "supervisor/sandbox"}},
	{"probes", []string{"probes"}},
	{"cgroups", []string{"cgroups"}},
	// The pure core and the deciders beside it.
	{"core", []string{"supervisor/lifecycle", "supervisor/admission", "supervisor/eviction",
		"supervisor/podsecurity"}},
	// What everything says about a pod, device and hub alike: QoS,
	// sidecars, priority, instance IDs, exit records, resource arithmetic,
	// host commands, manifest decoding and validation, PriorityClasses,
	// kubectl's pod columns.
	{"vocabulary", []string{"pod"}},
	// SQLite's schema migrations, shared by the device's and the hub's
	// databases.
	{"sqldb", []string{"sqldb"}},
	// The Prometheus text exposition and its instruments, for both
	// binaries' /metrics.
	{"metrics", []string{"metrics"}},
	// What a device's kernel must offer (podvisor check-kernel).
	{"kernel", []string{"kernel"}},
	// Operating-system updates through RAUC or SWUpdate: drivers of
	// outside tools, linking nothing of the daemon.
	{"firmware", []string{"firmware"}},
	// Release tools (SBOM); they read binaries, not podvisor's packages.
	{"packaging", []string{"packaging"}},
	// Tests and their tools may use anything.
	{"test", []string{"test"}},
}

// allowed lists, for each layer, the other layers it may import.
var allowed = map[string][]string{
	"cmd":        {"config", "uplink", "hub", "wire", "shell", "runtime", "probes", "cgroups", "core", "vocabulary", "sqldb", "metrics", "kernel", "firmware"},
	"config":     {"core", "vocabulary"},
	"uplink":     {"wire", "shell", "core", "vocabulary", "sqldb", "metrics"},
	"hub":        {"wire", "vocabulary", "sqldb", "metrics"},
	"wire":       {},
	"shell":      {"config", "runtime", "probes", "cgroups", "core", "vocabulary", "sqldb", "metrics"},
	"runtime":    {"cgroups", "vocabulary"},
	"probes":     {"vocabulary"},
	"cgroups":    {"vocabulary"},
	"core":       {"vocabulary"},
	"vocabulary": {},
	"sqldb":      {},
	"metrics":    {},
	"kernel":     {},
	"firmware":   {"wire"}, // agent: release manifests and orders
	"packaging":  {},
	"test":       {"cmd", "config", "uplink", "hub", "wire", "shell", "runtime", "probes", "cgroups", "core", "vocabulary", "sqldb", "metrics", "kernel", "packaging", "firmware"},
}

// layerOf is the layer of a package path relative to the module: the one
// with the longest folder that holds it.
func layerOf(rel string) string {
	best, name := -1, ""
	for _, l := range layers {
		for _, f := range l.folders {
			if (rel == f || strings.HasPrefix(rel, f+"/")) && len(f) > best {
				best, name = len(f), l.name
			}
		}
	}
	return name
}

type pkg struct {
	ImportPath string
	Imports    []string // non-test imports: what the binaries link
}

// listPackages lists podvisor's packages with their non-test imports.
func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			t.Fatalf("go list: %v\n%s", err, exit.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			return pkgs
		} else if err != nil {
			t.Fatalf("decoding go list: %v", err)
		}
		pkgs = append(pkgs, p)
	}
}

func TestImportEdgesPointDown(t *testing.T) {
	edges := 0
	for _, p := range listPackages(t) {
		from, ok := relative(p.ImportPath)
		if !ok {
			continue
		}
		fromLayer := layerOf(from)
		if fromLayer == "" {
			t.Errorf("package %s is in no layer: add its folder to layers in this test", from)
			continue
		}
		for _, imp := range p.Imports {
			to, ok := relative(imp)
			if !ok {
				continue
			}
			edges++
			toLayer := layerOf(to)
			if toLayer != fromLayer && !slices.Contains(allowed[fromLayer], toLayer) {
				t.Errorf("forbidden import %s (%s) → %s (%s)", from, fromLayer, to, toLayer)
			}
		}
	}
	if edges == 0 {
		t.Fatal("go list listed no import between podvisor's packages: the test checks nothing")
	}
}

// concreteRuntimes are the runtimes' own packages. The daemon speaks to
// runtimes only through supervisor/runtime (its types, its capabilities,
// its registry); the commands choose which runtimes a binary carries.
var concreteRuntimes = []string{"supervisor/runtime/containerd", "supervisor/runtime/process"}

// runtimeSharing are the imports between concrete runtimes there are
// reasons for: the containerd plugin writes its containers' logs with the
// shim's CRI log writer, in the same format and rotation.
var runtimeSharing = map[[2]string]bool{
	{"supervisor/runtime/containerd/plugin", "supervisor/runtime/process/shim"}: true,
}

// concreteRuntimeOf is the concrete runtime whose tree holds a package,
// or "".
func concreteRuntimeOf(rel string) string {
	for _, r := range concreteRuntimes {
		if rel == r || strings.HasPrefix(rel, r+"/") {
			return r
		}
	}
	return ""
}

// mayImportRuntime reports whether a package may import the concrete
// runtime rt: its own tree, the commands and the tests may.
func mayImportRuntime(from, rt string) bool {
	return concreteRuntimeOf(from) == rt || layerOf(from) == "cmd" || layerOf(from) == "test"
}

func TestOnlyCommandsChooseRuntimes(t *testing.T) {
	for _, p := range listPackages(t) {
		from, ok := relative(p.ImportPath)
		if !ok {
			continue
		}
		for _, imp := range p.Imports {
			to, ok := relative(imp)
			if !ok {
				continue
			}
			if rt := concreteRuntimeOf(to); rt != "" && !mayImportRuntime(from, rt) && !runtimeSharing[[2]string{from, to}] {
				t.Errorf("%s imports the concrete runtime %s: speak to it through supervisor/runtime", from, to)
			}
		}
	}
}

func TestConcreteRuntimeRule(t *testing.T) {
	for _, tc := range []struct {
		from, rt string
		may      bool
	}{
		{"supervisor", "supervisor/runtime/containerd", false},
		{"supervisor/api", "supervisor/runtime/process", false},
		{"supervisor/images", "supervisor/runtime/containerd", false},
		{"supervisor/runtime", "supervisor/runtime/process", false},
		{"supervisor/runtime/containerd", "supervisor/runtime/process", false},
		{"supervisor/runtime/process/shim", "supervisor/runtime/process", true},
		{"cmd/podvisor", "supervisor/runtime/containerd", true},
		{"test/e2e", "supervisor/runtime/process", true},
	} {
		if got := mayImportRuntime(tc.from, tc.rt); got != tc.may {
			t.Errorf("%s may import %s: %v, want %v", tc.from, tc.rt, got, tc.may)
		}
	}
}

// TestLayersAreOneWay checks the table itself: no two layers may import
// each other, directly or through others.
func TestLayersAreOneWay(t *testing.T) {
	var visit func(name string, path []string)
	visit = func(name string, path []string) {
		if slices.Contains(path, name) {
			t.Fatalf("layers loop: %s → %s", strings.Join(path, " → "), name)
		}
		for _, next := range allowed[name] {
			visit(next, append(path, name))
		}
	}
	for _, l := range layers {
		if _, ok := allowed[l.name]; !ok {
			t.Errorf("layer %s has no entry in allowed", l.name)
		}
		visit(l.name, nil)
	}
}

// relative is a podvisor package's path inside the module.
func relative(path string) (string, bool) {
	if path == module {
		return "", true
	}
	return strings.CutPrefix(path, module+"/")
}

// The layer table must catch what the issue named as loops.
func TestLayerOfNamedLoops(t *testing.T) {
	for _, tc := range []struct{ from, to string }{
		{"cgroups", "supervisor/resources"},
		{"probes", "supervisor/lifecycle"},
		{"probes", "supervisor/runtime/process/shim"},
		{"probes", "supervisor/sandbox"},
		{"supervisor", "sync/store"},
		{"sync/hub", "supervisor/state"},
		{"sync/hub", "supervisor"},
		{"sync/hub/kinds", "sync/uplink"},
		{"sync/uplink", "sync/hub"},
		{"supervisor/runtime/process", "supervisor/lifecycle"},
	} {
		if f, to := layerOf(tc.from), layerOf(tc.to); f == to || slices.Contains(allowed[f], to) {
			t.Errorf("%s → %s (%s → %s) would be allowed", tc.from, tc.to, f, to)
		}
	}
}
