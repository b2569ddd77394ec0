package layers

import (
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// docs/layout.md is the newcomer's map: it names every package, and every
// folder it names in its tables exists.
func TestLayoutMapNamesEveryPackage(t *testing.T) {
	data, err := os.ReadFile("../../docs/layout.md")
	if err != nil {
		t.Fatal(err)
	}
	named := map[string]bool{}
	// The first cell of a table row: `folder`, or several `a`, `b`.
	row := regexp.MustCompile(`(?m)^\| ([^|]+) \|`)
	folder := regexp.MustCompile("`([a-z0-9_./-]+)`")
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		for _, f := range folder.FindAllStringSubmatch(m[1], -1) {
			named[f[1]] = true
		}
	}
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}}", module+"/...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	packages := strings.Fields(string(out))
	if len(packages) < 20 {
		t.Fatalf("go list listed %d packages: the test checks nothing", len(packages))
	}
	for _, p := range packages {
		rel, _ := relative(p)
		if !named[rel] {
			t.Errorf("docs/layout.md does not name the package %s", rel)
		}
	}
	for f := range named {
		if _, err := os.Stat("../../" + f); err != nil {
			t.Errorf("docs/layout.md names %s, which does not exist", f)
		}
	}
}
