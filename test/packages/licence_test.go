package packages

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// apacheMD5 is the md5 of the Apache License 2.0's verbatim text, as
// apache.org publishes it (and Debian's common-licenses/Apache-2.0).
const apacheMD5 = "3b83ef96387f14655fc854ddc3c6bd57"

func md5Of(t *testing.T, rel string) string {
	t.Helper()
	sum := md5.Sum([]byte(read(t, rel)))
	return hex.EncodeToString(sum[:])
}

// LICENSE is the Apache License 2.0 unmodified, and NOTICE names the
// project and every directory of third_party/, each of which carries its
// own licence file.
func TestLicenseAndNotice(t *testing.T) {
	lic := read(t, "LICENSE")
	if !strings.HasPrefix(strings.TrimSpace(lic), "Apache License\n                           Version 2.0, January 2004") {
		t.Errorf("LICENSE does not start with the Apache License 2.0's header: %.80q", lic)
	}
	if got := md5Of(t, "LICENSE"); got != apacheMD5 {
		t.Errorf("LICENSE md5 %s, want %s: it is not the verbatim Apache License 2.0", got, apacheMD5)
	}
	notice := read(t, "NOTICE")
	if !strings.HasPrefix(notice, "podvisor\nCopyright 2026 the podvisor authors\n") {
		t.Errorf("NOTICE does not start with the project and its copyright: %.60q", notice)
	}
	dirs, err := filepath.Glob(filepath.Join(repo, "third_party", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("third_party/: %v %v", dirs, err)
	}
	copyright := read(t, "packaging/nfpm/copyright")
	for _, d := range dirs {
		rel := "third_party/" + filepath.Base(d)
		if !strings.Contains(notice, rel) {
			t.Errorf("NOTICE does not name %s", rel)
		}
		if !strings.Contains(copyright, "\nFiles: "+rel+"/*\n") {
			t.Errorf("packaging/nfpm/copyright has no Files: stanza for %s", rel)
		}
		if m, _ := filepath.Glob(filepath.Join(d, "LICENSE*")); len(m) == 0 {
			t.Errorf("%s has no LICENSE file", rel)
		}
	}
}

// The Yocto recipe declares Apache-2.0 with LICENSE's real md5; it builds
// no podhub, the only binary linking the MIT broker, or it would have to
// say MIT too.
func TestYoctoLicense(t *testing.T) {
	bb := parseBitBake(t, layer+"/recipes-core/podvisor/podvisor_git.bb")
	want := "Apache-2.0"
	if strings.Contains(first(bb, "GO_INSTALL"), "cmd/podhub") {
		want = "Apache-2.0 & MIT"
	}
	if got := first(bb, "LICENSE"); got != want {
		t.Errorf("podvisor_git.bb: LICENSE = %q, want %q", got, want)
	}
	chk := first(bb, "LIC_FILES_CHKSUM")
	if wantChk := "file://src/${GO_IMPORT}/LICENSE;md5=" + md5Of(t, "LICENSE"); !strings.Contains(chk, wantChk) {
		t.Errorf("podvisor_git.bb: LIC_FILES_CHKSUM = %q, want it to hold %q", chk, wantChk)
	}
}

// The Buildroot package declares Apache-2.0 and its licence files, whose
// sha256 in podvisor.hash (which legal-info checks) are the files'.
func TestBuildrootLicense(t *testing.T) {
	mk := read(t, external+"/package/podvisor/podvisor.mk")
	val := func(name string) string {
		m := regexp.MustCompile(`(?m)^PODVISOR_` + name + `\s*=\s*(.*)$`).FindStringSubmatch(mk)
		if m == nil {
			return ""
		}
		return strings.TrimSpace(m[1])
	}
	if got := val("LICENSE"); got != "Apache-2.0" {
		t.Errorf("PODVISOR_LICENSE = %q, want Apache-2.0", got)
	}
	files := strings.Fields(val("LICENSE_FILES"))
	if !slices.Contains(files, "LICENSE") {
		t.Errorf("PODVISOR_LICENSE_FILES = %q, want LICENSE among them", files)
	}
	hashes := read(t, external+"/package/podvisor/podvisor.hash")
	for _, f := range files {
		sum := sha256.Sum256([]byte(read(t, f)))
		if line := "sha256  " + hex.EncodeToString(sum[:]) + "  " + f; !strings.Contains(hashes, "\n"+line+"\n") {
			t.Errorf("podvisor.hash lacks %q (legal-info fails on a licence file's wrong or missing hash)", line)
		}
	}
}

// Each nfpm package declares its licence and installs it: Debian's
// copyright file for .deb, LICENSE elsewhere (and the MIT broker's
// licence with podhub), NOTICE everywhere; packages.sh links every
// top-level name the packages' sources use.
func TestNfpmLicence(t *testing.T) {
	script := read(t, "packaging/packages.sh")
	for _, c := range []struct {
		name, license string
		extra         []string // more licence files for rpm, apk and ipk
	}{
		{"podvisor", "Apache-2.0", nil},
		{"podvisor-containerd", "Apache-2.0", nil},
		{"podhub", "Apache-2.0 AND MIT", []string{"third_party/mochi-mqtt-server/LICENSE.md"}},
	} {
		cfg := loadNfpm(t, c.name)
		if cfg.License != c.license {
			t.Errorf("%s.yaml: license %q, want %q", c.name, cfg.License, c.license)
		}
		got := map[string]string{} // packager + " " + src → dst
		for _, e := range cfg.Contents {
			got[e.Packager+" "+e.Src] = e.Dst
			if (e.Type == "doc" || e.Type == "license") && e.Packager != "rpm" {
				t.Errorf("%s.yaml: %s has type %s, which nfpm packs into .rpm only", c.name, e.Dst, e.Type)
			}
			if top, _, _ := strings.Cut(e.Src, "/"); e.Src != "" && top != "bin" && top != "packaging" &&
				!strings.Contains(script, `"$top/`+top+`"`) {
				t.Errorf("%s.yaml: %s, but packages.sh does not link %s into its stage", c.name, e.Src, top)
			}
		}
		doc := "/usr/share/doc/" + c.name + "/"
		if got["deb packaging/nfpm/copyright"] != doc+"copyright" {
			t.Errorf("%s.yaml: no packaging/nfpm/copyright at %scopyright for deb", c.name, doc)
		}
		if got[" NOTICE"] != doc+"NOTICE" {
			t.Errorf("%s.yaml: no NOTICE at %sNOTICE", c.name, doc)
		}
		for _, p := range []string{"rpm", "apk", "ipk"} {
			for _, src := range append([]string{"LICENSE"}, c.extra...) {
				if !strings.HasPrefix(got[p+" "+src], "/usr/share/licenses/"+c.name+"/") {
					t.Errorf("%s.yaml: no %s under /usr/share/licenses/%s/ for %s", c.name, src, c.name, p)
				}
			}
		}
	}
	// The MIT text in the Debian copyright file is the broker's own.
	mit := read(t, "third_party/mochi-mqtt-server/LICENSE.md")
	perm := mit[strings.Index(mit, "Permission is hereby granted"):]
	var folded []string
	for _, l := range strings.Split(strings.TrimRight(perm, "\n"), "\n") {
		if l == "" {
			l = "."
		}
		folded = append(folded, " "+l)
	}
	if !strings.Contains(read(t, "packaging/nfpm/copyright"), "\nLicense: MIT\n"+strings.Join(folded, "\n")) {
		t.Error("packaging/nfpm/copyright's MIT text differs from third_party/mochi-mqtt-server/LICENSE.md")
	}
}
