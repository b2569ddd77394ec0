package main

import (
	"os"
	"runtime/debug"
	"strings"
	"testing"
)

// The test binary carries build information like any other Go binary:
// its SBOM names it with its digest and lists the modules linked in.
func TestDescribeListsLinkedModules(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var doc document
	if err := describe(&doc, map[string]bool{}, self); err != nil {
		t.Fatalf("describe %s: %v", self, err)
	}
	if len(doc.Packages) < 2 || len(doc.Packages[0].Checksums) != 1 || len(doc.Packages[0].Checksums[0].Value) != 64 {
		t.Fatalf("first package should be the binary with its SHA-256, got %+v", doc.Packages)
	}
	// The test binary is built from podvisor's module: its licence is
	// podvisor's own (LICENSE).
	if b := doc.Packages[0]; b.LicenseDeclared != "Apache-2.0" || b.LicenseConcluded != "Apache-2.0" {
		t.Errorf("podvisor's binary: licenseDeclared %q, licenseConcluded %q; want Apache-2.0", b.LicenseDeclared, b.LicenseConcluded)
	}
	var stdlib bool
	for _, p := range doc.Packages[1:] {
		if p.LicenseDeclared != "NOASSERTION" && p.Name != "github.com/mochi-mqtt/server/v2" {
			t.Errorf("%s: licenseDeclared %q; only in-tree modules' licences are known", p.Name, p.LicenseDeclared)
		}
		if p.Name == "stdlib" && strings.HasPrefix(p.Version, "go1.") {
			stdlib = true
		}
		if strings.ContainsAny(p.ID[len("SPDXRef-"):], "/@ ") {
			t.Errorf("SPDX id %q has characters SPDX forbids", p.ID)
		}
	}
	if !stdlib {
		t.Errorf("no stdlib package in %+v", doc.Packages)
	}
	if err := describe(&doc, map[string]bool{}, "main.go"); err == nil {
		t.Error("a source file has no build information; describe should refuse it")
	}
}

// Only the in-tree copy of a module has a known licence: the same module
// fetched from the proxy, or an unknown local replace, is NOASSERTION.
func TestDepLicense(t *testing.T) {
	const mochi = "github.com/mochi-mqtt/server/v2"
	for _, c := range []struct {
		d    *debug.Module
		want string
	}{
		{&debug.Module{Path: mochi, Version: "v2.7.9", Replace: &debug.Module{Path: "./third_party/mochi-mqtt-server", Version: "(devel)"}}, "MIT"},
		{&debug.Module{Path: mochi, Version: "v2.7.9"}, "NOASSERTION"},
		{&debug.Module{Path: mochi, Version: "v2.7.9", Replace: &debug.Module{Path: "example.com/fork", Version: "v2.7.10"}}, "NOASSERTION"},
		{&debug.Module{Path: "example.com/other", Replace: &debug.Module{Path: "../other", Version: "(devel)"}}, "NOASSERTION"},
		{&debug.Module{Path: mochi, Version: "v2.7.9", Replace: &debug.Module{Path: "../mochi", Version: "(devel)"}}, "NOASSERTION"},
	} {
		if got := depLicense(c.d); got != c.want {
			t.Errorf("depLicense(%s => %+v) = %q, want %q", c.d.Path, c.d.Replace, got, c.want)
		}
	}
}
