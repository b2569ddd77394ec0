package main

import (
	"sort"
	"strings"
)

// Symbol is one sized symbol of a binary's file-backed sections.
type Symbol struct {
	Name string
	Size uint64
}

// Row is one line of the report: a group and the bytes its symbols take.
type Row struct {
	Group string
	Bytes uint64
}

// Groups the linker emits that belong to no package.
const (
	groupTypes   = "(type descriptors, type:*)"
	groupGoFunc  = "(go:func.* funcdata)"
	groupGoOther = "(go:string, go:itab, constants, other linker data)"
	// groupNoPackage holds assembly and linker symbols named without a
	// package, as the runtime's debugCall1024 or _rt0_arm64_linux.
	groupNoPackage = "(no package: assembly, linker)"
)

// packageOf returns the import path of the package that defined a Go
// symbol: "github.com/a/b/c.(*T).M" → "github.com/a/b/c". Instantiation
// brackets are cut first, because their type arguments hold other paths
// and dots: "slices.Sort[github.com/x/y.T]" → "slices". A module path
// whose last element has a dot ("gopkg.in/inf.v0") is recognised from
// modules, the binary's module list.
func packageOf(name string, modules []string) string {
	switch {
	case strings.HasPrefix(name, "type:"):
		return groupTypes
	case strings.HasPrefix(name, "go:func."):
		return groupGoFunc
	case strings.HasPrefix(name, "go:"), strings.HasPrefix(name, "$"): // $f64.*: float constants
		return groupGoOther
	}
	if i := strings.IndexByte(name, '['); i >= 0 {
		name = name[:i]
	}
	slash := strings.LastIndexByte(name, '/') + 1
	for _, m := range modules {
		if strings.HasPrefix(name, m+".") && len(m) > slash {
			slash = len(m)
		}
	}
	// The linker escapes dots in a path's last element as %2e
	// ("paho%2emqtt%2egolang"), so the first dot ends the path.
	dot := strings.IndexByte(name[slash:], '.')
	if dot < 0 {
		return groupNoPackage
	}
	return strings.ReplaceAll(name[:slash+dot], "%2e", ".")
}

// moduleOf returns the module among modules (paths from the binary's
// build info) that holds pkg, the longest matching path winning; a
// standard-library package is reported as "std/" and its first path
// element ("std/crypto" for crypto/tls and crypto/sha256); a package of no listed
// module is returned unchanged.
func moduleOf(pkg string, modules []string) string {
	if strings.HasPrefix(pkg, "(") || pkg == "main" {
		return pkg // "main" is the command's own package, named so by the linker
	}
	best := ""
	for _, m := range modules {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	if best != "" {
		return best
	}
	first, _, _ := strings.Cut(pkg, "/")
	if !strings.Contains(first, ".") {
		return "std/" + first // std/vendor: the standard library's copies of golang.org/x
	}
	return pkg
}

// group sums the symbols by key (package or module; modules as for
// packageOf) and returns the rows largest first, ties by name so the
// report is stable.
func group(syms []Symbol, modules []string, key func(pkg string) string) []Row {
	sums := map[string]uint64{}
	for _, s := range syms {
		sums[key(packageOf(s.Name, modules))] += s.Size
	}
	rows := make([]Row, 0, len(sums))
	for g, b := range sums {
		rows = append(rows, Row{g, b})
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Bytes != rows[j].Bytes {
			return rows[i].Bytes > rows[j].Bytes
		}
		return rows[i].Group < rows[j].Group
	})
	return rows
}
