package main

import (
	"os"
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
	var stdlib bool
	for _, p := range doc.Packages[1:] {
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
