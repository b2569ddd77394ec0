package packages

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/kernel"
)

const (
	layer    = "packaging/yocto/meta-podvisor"
	external = "packaging/buildroot"
)

// fragmentOptions reads a kernel config fragment's CONFIG_X=y lines;
// anything else but comments and blank lines is an error.
func fragmentOptions(t *testing.T, rel string) []string {
	t.Helper()
	var opts []string
	for i, line := range strings.Split(read(t, rel), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		opt, ok := strings.CutSuffix(line, "=y")
		if !ok || !regexp.MustCompile(`^CONFIG_[A-Z0-9_]+$`).MatchString(opt) {
			t.Errorf("%s:%d: %q is not CONFIG_X=y", rel, i+1, line)
			continue
		}
		opts = append(opts, opt)
	}
	return opts
}

// The Yocto kernel fragments ask for exactly the options podvisor
// check-kernel checks (the first of each AnyOf): podvisor.cfg those every
// device needs or is better for, podvisor-containerd.cfg those only
// containerd pods need. A requirement added to kernel/requirements.go
// fails here until the fragment has it.
func TestKernelFragmentsMatchRequirements(t *testing.T) {
	var wantMain, wantCtr []string
	for _, r := range kernel.Requirements {
		if r.Need == kernel.Containerd {
			wantCtr = append(wantCtr, r.AnyOf[0])
		} else {
			wantMain = append(wantMain, r.AnyOf[0])
		}
	}
	for _, f := range []struct {
		file string
		want []string
	}{{"podvisor.cfg", wantMain}, {"podvisor-containerd.cfg", wantCtr}} {
		got := fragmentOptions(t, layer+"/recipes-kernel/linux/files/"+f.file)
		slices.Sort(got)
		want := slices.Sorted(slices.Values(f.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s has %q\nkernel.Requirements want %q", f.file, got, want)
		}
	}
	bbappend := read(t, layer+"/recipes-kernel/linux/linux-%.bbappend")
	for _, f := range []string{"file://podvisor.cfg", "file://podvisor-containerd.cfg"} {
		if !strings.Contains(bbappend, f) {
			t.Errorf("linux-%%.bbappend does not add %s", f)
		}
	}
}

// bbAssign is a BitBake variable assignment: NAME[flag] op "value", with
// export, overrides (:append, :${PN}) and line continuations.
var (
	bbAssign   = regexp.MustCompile(`^(export\s+)?([A-Za-z_][A-Za-z0-9_\-${}.+]*(:[A-Za-z0-9_\-${}.+%]+)*)(\[[A-Za-z_-]+\])?\s*(\?\?=|\?=|:=|\+=|=\+|\.=|=\.|=)\s*"(.*)"$`)
	bbInherit  = regexp.MustCompile(`^inherit(\s+[a-z0-9_.\-${}]+)+$`)
	bbFuncHead = regexp.MustCompile(`^(python\s+)?[a-z_][a-z0-9_\-]*(:[a-z_]+)?\s*\(\)\s*\{$`)
)

// parseBitBake checks that every line of a .bb, .bbappend or .conf is a
// comment, an assignment of a quoted value, an inherit or a shell or
// python function, and returns the assignments by variable (flags as
// NAME[flag]).
func parseBitBake(t *testing.T, rel string) map[string][]string {
	t.Helper()
	vars := map[string][]string{}
	lines := strings.Split(read(t, rel), "\n")
	for i := 0; i < len(lines); i++ {
		line := strings.TrimSpace(lines[i])
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		start := i
		for strings.HasSuffix(line, `\`) && i+1 < len(lines) { // continued value
			i++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(lines[i])
		}
		switch {
		case bbInherit.MatchString(line):
			vars["inherit"] = append(vars["inherit"], strings.Fields(line)[1:]...)
		case bbFuncHead.MatchString(line):
			for i++; i < len(lines) && lines[i] != "}"; i++ {
			}
			if i == len(lines) {
				t.Errorf("%s:%d: function not closed by a line \"}\"", rel, start+1)
			}
		default:
			m := bbAssign.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("%s:%d: not a BitBake assignment, inherit or function: %q", rel, start+1, line)
				continue
			}
			vars[m[2]+m[4]] = append(vars[m[2]+m[4]], m[6])
		}
	}
	return vars
}

func first(vars map[string][]string, name string) string {
	if v := vars[name]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// The layer's files parse as BitBake and set what bitbake requires of a
// layer and of a recipe, with systemd and sysvinit integration and a
// static, cgo-free build; every file the recipe installs is in the
// repository.
func TestYoctoLayer(t *testing.T) {
	conf := parseBitBake(t, layer+"/conf/layer.conf")
	for _, v := range []string{"BBPATH", "BBFILES", "BBFILE_COLLECTIONS", "BBFILE_PATTERN_podvisor",
		"BBFILE_PRIORITY_podvisor", "LAYERSERIES_COMPAT_podvisor", "LAYERDEPENDS_podvisor"} {
		if len(conf[v]) == 0 {
			t.Errorf("layer.conf does not set %s", v)
		}
	}

	bb := parseBitBake(t, layer+"/recipes-core/podvisor/podvisor_git.bb")
	for _, v := range []string{"SUMMARY", "LICENSE", "LIC_FILES_CHKSUM", "SRC_URI", "S", "SRCREV", "GO_IMPORT", "GO_INSTALL",
		"SYSTEMD_SERVICE:${PN}", "INITSCRIPT_NAME", "INITSCRIPT_PARAMS", "CONFFILES:${PN}", "FILES:${PN}-containerd"} {
		if len(bb[v]) == 0 {
			t.Errorf("podvisor_git.bb does not set %s", v)
		}
	}
	for _, c := range []string{"go-mod", "systemd", "update-rc.d"} {
		if !slices.Contains(bb["inherit"], c) {
			t.Errorf("podvisor_git.bb does not inherit %s (inherits %q)", c, bb["inherit"])
		}
	}
	if first(bb, "CGO_ENABLED") != "0" {
		t.Errorf("CGO_ENABLED = %q, want 0", first(bb, "CGO_ENABLED"))
	}
	if first(bb, "SYSTEMD_SERVICE:${PN}") != "podvisor.service" || first(bb, "INITSCRIPT_NAME") != "podvisor" {
		t.Error("SYSTEMD_SERVICE or INITSCRIPT_NAME does not name podvisor's")
	}
	for _, cmd := range []string{"podvisor", "podvisor-shim", "podvisor-containerd"} {
		if !strings.Contains(first(bb, "GO_INSTALL"), "${GO_IMPORT}/cmd/"+cmd) {
			t.Errorf("GO_INSTALL does not build cmd/%s", cmd)
		}
	}
	for _, m := range regexp.MustCompile(`\$\{PODVISOR_SRC\}/(\S+)`).FindAllStringSubmatch(read(t, layer+"/recipes-core/podvisor/podvisor_git.bb"), -1) {
		if _, err := os.Stat(filepath.Join(repo, m[1])); err != nil {
			t.Errorf("the recipe installs %s: %v", m[1], err)
		}
	}

	pg := parseBitBake(t, layer+"/recipes-core/packagegroups/packagegroup-podvisor.bb")
	if !slices.Contains(pg["inherit"], "packagegroup") || !strings.Contains(first(pg, "RDEPENDS:${PN}"), "podvisor") ||
		!strings.Contains(first(pg, "RDEPENDS:${PN}-containerd"), "podvisor-containerd") {
		t.Errorf("packagegroup-podvisor: inherit %q, RDEPENDS %q / %q", pg["inherit"], pg["RDEPENDS:${PN}"], pg["RDEPENDS:${PN}-containerd"])
	}
	parseBitBake(t, layer+"/recipes-kernel/linux/linux-%.bbappend")
}

// Buildroot's names for a golang-package's variables: the generic package
// infrastructure's that podvisor.mk may use, then the Go infrastructure's
// (docs/manual/adding-packages-golang.adoc, and _GO_ENV from
// package/pkg-golang.mk).
var (
	buildrootGeneric = []string{"VERSION", "SITE", "SITE_METHOD", "SOURCE", "LICENSE", "LICENSE_FILES", "DEPENDENCIES",
		"BUILD_CMDS", "INSTALL_TARGET_CMDS", "INSTALL_INIT_SYSTEMD", "INSTALL_INIT_SYSV", "INSTALL_INIT_OPENRC", "USERS", "PERMISSIONS",
		"POST_INSTALL_TARGET_HOOKS", "CPE_ID_VENDOR"}
	buildrootGolang = []string{"GOMOD", "LDFLAGS", "TAGS", "BUILD_TARGETS", "BIN_NAME", "INSTALL_BINS", "GO_ENV"}
)

// The Buildroot package uses only variable names the manual defines, sets
// those a golang-package needs, and installs the init integration; the
// BR2_EXTERNAL tree's name matches the variable the package uses.
func TestBuildrootPackage(t *testing.T) {
	mk := read(t, external+"/package/podvisor/podvisor.mk")
	set := map[string]string{}
	for i, line := range strings.Split(mk, "\n") {
		if m := regexp.MustCompile(`^(?:define\s+)?PODVISOR_([A-Z0-9_]+)\s*(\+=|\?=|:=|=|$)\s*(.*)`).FindStringSubmatch(line); m != nil {
			if !slices.Contains(buildrootGeneric, m[1]) && !slices.Contains(buildrootGolang, m[1]) {
				t.Errorf("podvisor.mk:%d: PODVISOR_%s is no variable of Buildroot's package infrastructure", i+1, m[1])
			}
			set[m[1]] = strings.TrimSpace(set[m[1]] + " " + m[3]) // = then += accumulate
		}
	}
	for _, v := range []string{"VERSION", "SITE", "LICENSE", "GOMOD", "BUILD_TARGETS", "LDFLAGS", "GO_ENV",
		"BUILD_CMDS", "INSTALL_TARGET_CMDS", "INSTALL_INIT_SYSTEMD", "INSTALL_INIT_SYSV"} {
		if _, ok := set[v]; !ok {
			t.Errorf("podvisor.mk does not set PODVISOR_%s", v)
		}
	}
	// Buildroot since 2025 refuses _INSTALL_BINS; before, it installed only
	// the binary named after the package. _INSTALL_TARGET_CMDS installs all.
	if _, ok := set["INSTALL_BINS"]; ok {
		t.Error("podvisor.mk sets PODVISOR_INSTALL_BINS, which current Buildroot refuses")
	}
	if set["GOMOD"] != "github.com/podvisor/podvisor" {
		t.Errorf("PODVISOR_GOMOD = %q, want the module path of go.mod", set["GOMOD"])
	}
	if !strings.Contains(set["GO_ENV"], "CGO_ENABLED=0") {
		t.Errorf("PODVISOR_GO_ENV = %q, want CGO_ENABLED=0", set["GO_ENV"])
	}
	for _, target := range strings.Fields(set["BUILD_TARGETS"]) {
		if _, err := os.Stat(filepath.Join(repo, target)); err != nil {
			t.Errorf("PODVISOR_BUILD_TARGETS: %v", err)
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(mk), "$(eval $(golang-package))") {
		t.Error("podvisor.mk does not end with $(eval $(golang-package))")
	}
	for _, m := range regexp.MustCompile(`\$\(@D\)/(packaging/\S+)`).FindAllStringSubmatch(mk, -1) {
		if _, err := os.Stat(filepath.Join(repo, m[1])); err != nil {
			t.Errorf("podvisor.mk installs %s: %v", m[1], err)
		}
	}

	desc := read(t, external+"/external.desc")
	name := regexp.MustCompile(`(?m)^name: ([A-Z0-9_]+)$`).FindStringSubmatch(desc)
	if name == nil {
		t.Fatalf("external.desc has no name: %q", desc)
	}
	pathVar := fmt.Sprintf("BR2_EXTERNAL_%s_PATH", name[1])
	for _, f := range []string{"external.mk", "Config.in", "package/podvisor/podvisor.mk"} {
		if !strings.Contains(read(t, external+"/"+f), pathVar) {
			t.Errorf("%s does not use %s", f, pathVar)
		}
	}
	cfg := read(t, external+"/package/podvisor/Config.in")
	for _, want := range []string{"config BR2_PACKAGE_PODVISOR\n", "depends on BR2_PACKAGE_HOST_GO_TARGET_ARCH_SUPPORTS", "config BR2_PACKAGE_PODVISOR_CONTAINERD\n"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("package/podvisor/Config.in lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(repo, external, "package/podvisor/podvisor.hash")); err != nil {
		t.Error(err)
	}
}
