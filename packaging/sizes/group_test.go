package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/prereq"
)

func TestPackageOf(t *testing.T) {
	for name, want := range map[string]string{
		"runtime.mallocgc":                                          "runtime",
		"k8s.io/api/core/v1.init":                                   "k8s.io/api/core/v1",
		"github.com/cilium/ebpf/btf.(*decoder).inflateType":         "github.com/cilium/ebpf/btf",
		"gopkg.in/inf.v0.(*Dec).Add":                                "gopkg.in/inf.v0",
		"go.yaml.in/yaml/v2.yaml_parser_parse":                      "go.yaml.in/yaml/v2",
		"slices.SortFunc[go.shape.*uint8]":                          "slices",
		"sort.Slice[github.com/x/y.T]":                              "sort",
		"github.com/a/b.F[k8s.io/api/core/v1.Pod]":                  "github.com/a/b",
		"vendor/golang.org/x/net/idna.idnaValues":                   "vendor/golang.org/x/net/idna",
		"type:*k8s.io/api/core/v1.Pod":                              groupTypes,
		"go:func.*":                                                 groupGoFunc,
		"$f64.3ff0000000000000":                                     groupGoOther,
		"go:string.*":                                               groupGoOther,
		"go:itab.*os.File,io.Reader":                                groupGoOther,
		"github.com/eclipse/paho%2emqtt%2egolang.(*client).Connect": "github.com/eclipse/paho.mqtt.golang",
		"gopkg.in/inf%2ev0.(*Dec).Add":                              "gopkg.in/inf.v0",
		"_rt0_arm64_linux":                                          groupNoPackage,
		"debugCall1024":                                             groupNoPackage,
	} {
		if got := packageOf(name, []string{"gopkg.in/inf.v0", "k8s.io/api"}); got != want {
			t.Errorf("packageOf(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestModuleOf(t *testing.T) {
	mods := []string{"k8s.io/api", "k8s.io/apimachinery", "github.com/godbus/dbus/v5", "github.com/p/q", "github.com/p/q/sub"}
	for pkg, want := range map[string]string{
		"k8s.io/api/core/v1":                   "k8s.io/api",
		"k8s.io/apimachinery/pkg/apis/meta/v1": "k8s.io/apimachinery",
		"k8s.io/apix":                          "k8s.io/apix", // a prefix of a path is not its module
		"github.com/godbus/dbus/v5":            "github.com/godbus/dbus/v5",
		"github.com/p/q/sub/x":                 "github.com/p/q/sub", // nested module wins
		"github.com/p/q/other":                 "github.com/p/q",
		"net/http":                             "std/net",
		"vendor/golang.org/x/net/idna":         "std/vendor",
		"runtime":                              "std/runtime",
		groupTypes:                             groupTypes,
		"main":                                 "main",
	} {
		if got := moduleOf(pkg, mods); got != want {
			t.Errorf("moduleOf(%q) = %q, want %q", pkg, got, want)
		}
	}
}

func TestGroupSumsAndOrders(t *testing.T) {
	syms := []Symbol{
		{"k8s.io/api/core/v1.init", 100},
		{"k8s.io/api/apps/v1.init", 50},
		{"net/http.(*Server).Serve", 70},
		{"net.(*conn).Read", 80},
		{"type:*k8s.io/api/core/v1.Pod", 30},
		{"github.com/b/b.F", 30},
	}
	mods := []string{"k8s.io/api", "github.com/b/b"}
	byModule := func(pkg string) string { return moduleOf(pkg, mods) }
	// equal sizes sort by name: "(..." < "github..." and "k8s..." < "std/net"
	want := []Row{{"k8s.io/api", 150}, {"std/net", 150}, {groupTypes, 30}, {"github.com/b/b", 30}}
	if got := group(syms, mods, byModule); !reflect.DeepEqual(got, want) {
		t.Errorf("by module: got %v, want %v", got, want)
	}
	byPackage := func(pkg string) string { return pkg }
	got := group(syms, mods, byPackage)
	if got[0] != (Row{"k8s.io/api/core/v1", 100}) || len(got) != 6 {
		t.Errorf("by package: got %v", got)
	}
}

// TestReportOnABinary builds this tool with its symbol table (go test
// strips its own binary) and reports on it: the report must find the
// runtime, the command (package main) and the function tables.
func TestReportOnABinary(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		prereq.Missing(t, "the go command: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "sizes")
	build := exec.Command(goTool, "build", "-trimpath", "-o", exe, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	var out strings.Builder
	if err := report(&out, exe, "module", 0); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"MiB stripped", ".gopclntab", "std/runtime\n", "  main\n", "std/debug\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	// A stripped binary is refused with the reason.
	stripped := filepath.Join(t.TempDir(), "stripped")
	build = exec.Command(goTool, "build", "-trimpath", "-ldflags=-s -w", "-o", stripped, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	if err := report(io.Discard, stripped, "module", 0); err == nil || !strings.Contains(err.Error(), "without -s") {
		t.Errorf("stripped binary: err = %v, want one naming -s", err)
	}
}
