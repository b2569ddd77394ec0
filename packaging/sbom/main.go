// Command sbom writes an SPDX 2.3 JSON software bill of materials for Go
// binaries from the build information the Go linker embeds in them (what
// `go version -m` prints): the main module, every module linked in with its
// version and checksum, and the build settings.
//
// Usage: go run ./packaging/sbom BINARY... > FILE.spdx.json
package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

type checksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type externalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type pkg struct {
	ID               string        `json:"SPDXID"`
	Name             string        `json:"name"`
	Version          string        `json:"versionInfo,omitempty"`
	Download         string        `json:"downloadLocation"`
	FilesAnalyzed    bool          `json:"filesAnalyzed"`
	Checksums        []checksum    `json:"checksums,omitempty"`
	ExternalRefs     []externalRef `json:"externalRefs,omitempty"`
	Comment          string        `json:"comment,omitempty"`
	PrimaryPurpose   string        `json:"primaryPackagePurpose,omitempty"`
	LicenseConcluded string        `json:"licenseConcluded"`
	LicenseDeclared  string        `json:"licenseDeclared"`
	CopyrightText    string        `json:"copyrightText"`
}

type relationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

type document struct {
	Version       string         `json:"spdxVersion"`
	DataLicense   string         `json:"dataLicense"`
	ID            string         `json:"SPDXID"`
	Name          string         `json:"name"`
	Namespace     string         `json:"documentNamespace"`
	CreationInfo  creationInfo   `json:"creationInfo"`
	Packages      []pkg          `json:"packages"`
	Relationships []relationship `json:"relationships"`
}

type creationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

var unsafeID = regexp.MustCompile(`[^A-Za-z0-9.-]`)

func spdxID(kind, name, version string) string {
	return "SPDXRef-" + kind + "-" + unsafeID.ReplaceAllString(name+"-"+version, "-")
}

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: sbom BINARY... > FILE.spdx.json")
		os.Exit(2)
	}
	doc := document{
		Version: "SPDX-2.3", DataLicense: "CC0-1.0", ID: "SPDXRef-DOCUMENT",
		CreationInfo: creationInfo{Created: created(), Creators: []string{"Tool: podvisor-packaging-sbom"}},
	}
	seen := map[string]bool{}
	var names []string
	for _, path := range os.Args[1:] {
		if err := describe(&doc, seen, path); err != nil {
			fmt.Fprintf(os.Stderr, "sbom: %s: %v\n", path, err)
			os.Exit(1)
		}
		names = append(names, filepath.Base(path))
	}
	doc.Name = fmt.Sprint(names)
	sum := sha256.Sum256([]byte(fmt.Sprint(doc.Packages)))
	doc.Namespace = "https://podvisor.io/spdx/" + hex.EncodeToString(sum[:8])
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(doc); err != nil {
		fmt.Fprintln(os.Stderr, "sbom:", err)
		os.Exit(1)
	}
}

// created honours SOURCE_DATE_EPOCH so a release rebuilt from the same
// commit yields the same document.
func created() string {
	t := time.Now()
	if s := os.Getenv("SOURCE_DATE_EPOCH"); s != "" {
		var sec int64
		if _, err := fmt.Sscan(s, &sec); err == nil {
			t = time.Unix(sec, 0)
		}
	}
	return t.UTC().Format(time.RFC3339)
}

func describe(doc *document, seen map[string]bool, path string) error {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return err
	}
	var settings string
	for _, s := range info.Settings {
		settings += s.Key + "=" + s.Value + " "
	}
	bin := pkg{
		ID: spdxID("File", filepath.Base(path), info.Main.Version), Name: filepath.Base(path),
		Version: info.Main.Version, Download: "NOASSERTION", PrimaryPurpose: "APPLICATION",
		Checksums:        []checksum{{"SHA256", hex.EncodeToString(h.Sum(nil))}},
		Comment:          "built with " + info.GoVersion + " from " + info.Path + "; " + settings,
		LicenseConcluded: "NOASSERTION", LicenseDeclared: "NOASSERTION", CopyrightText: "NOASSERTION",
	}
	if info.Main.Path == ownModule {
		bin.LicenseConcluded, bin.LicenseDeclared = ownLicense, ownLicense
		bin.CopyrightText = ownCopyright
	}
	doc.Packages = append(doc.Packages, bin)
	doc.Relationships = append(doc.Relationships, relationship{"SPDXRef-DOCUMENT", "DESCRIBES", bin.ID})
	goID := spdxID("Package", "golang.org/toolchain", info.GoVersion)
	add := func(id, name, version, sum, license string) {
		if !seen[id] {
			seen[id] = true
			p := pkg{ID: id, Name: name, Version: version, Download: "NOASSERTION",
				PrimaryPurpose: "LIBRARY", LicenseConcluded: license, LicenseDeclared: license, CopyrightText: "NOASSERTION",
				ExternalRefs: []externalRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/" + name + "@" + version}}}
			if sum != "" {
				p.Comment = "go.sum " + sum
			}
			doc.Packages = append(doc.Packages, p)
		}
		doc.Relationships = append(doc.Relationships, relationship{bin.ID, "CONTAINS", id})
	}
	add(goID, "stdlib", info.GoVersion, "", "NOASSERTION")
	for _, d := range info.Deps {
		m := d
		if d.Replace != nil {
			m = d.Replace
		}
		version := m.Version
		if version == "" {
			version = "(devel)" // a local replace, e.g. third_party/
		}
		add(spdxID("Package", d.Path, version), d.Path, version, m.Sum, depLicense(d))
	}
	return nil
}

// podvisor's own licence (LICENSE), for binaries built from its module.
const (
	ownModule    = "github.com/podvisor/podvisor"
	ownLicense   = "Apache-2.0"
	ownCopyright = "Copyright 2026 the podvisor authors"
)

// inTree are the licences of the modules podvisor carries in its tree
// (third_party/, used through a local replace), so known for certain.
var inTree = map[string]string{
	"github.com/mochi-mqtt/server/v2": "MIT", // third_party/mochi-mqtt-server/LICENSE.md
}

// depLicense is a linked module's licence where it is known: only for the
// in-tree copies (replaced by a path into third_party/; the binary records
// its version as "(devel)"). Others are NOASSERTION: a version fetched
// from the proxy is not read here, so nothing is asserted about it.
func depLicense(d *debug.Module) string {
	if d.Replace != nil && strings.HasPrefix(d.Replace.Path, "./third_party/") {
		if l, ok := inTree[d.Path]; ok {
			return l
		}
	}
	return "NOASSERTION"
}
