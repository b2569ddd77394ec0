package releases

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/prereq"
)

// build builds a program whose main package is module/cmd/name for
// goarch (and goarm), as a release's binaries are.
func build(t *testing.T, name, goarch, goarm string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		prereq.Missing(t, "go, to build the binaries a release is read from: %v", err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "cmd", name), 0o755)
	os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/fleet\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cmd", name, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644)
	out := filepath.Join(dir, name+"."+goarch)
	cmd := exec.Command("go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "GOARM="+goarm, "CGO_ENABLED=0", "GOFLAGS=-mod=mod", "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func TestInspectReadsNameAndArchitecture(t *testing.T) {
	for _, c := range []struct{ name, goarch, goarm, want string }{
		{"podvisor", "amd64", "", "amd64"},
		{"podvisor-shim", "arm", "7", "armv7"},
		{"podvisor-containerd", "arm", "6", "armv6"},
	} {
		name, arch, err := Inspect(build(t, c.name, c.goarch, c.goarm))
		if err != nil || name != c.name || arch != c.want {
			t.Errorf("%s %s/%s: %s %s %v, want %s", c.name, c.goarch, c.goarm, name, arch, err, c.want)
		}
	}
	other := build(t, "kubelet", "amd64", "")
	if _, _, err := Inspect(other); err == nil || !strings.Contains(err.Error(), other) || !strings.Contains(err.Error(), "not one of podvisor's binaries") {
		t.Errorf("another program: %v", err)
	}
	script := filepath.Join(t.TempDir(), "podvisor")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if _, _, err := Inspect(script); err == nil || !strings.Contains(err.Error(), script) {
		t.Errorf("a script: %v", err)
	}
}

func TestDescribeEncodesWhenGzipSavesATenth(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "text")
	os.WriteFile(text, bytes.Repeat([]byte("podvisor "), 10000), 0o644)
	random := filepath.Join(dir, "random")
	noise := make([]byte, 50000)
	rand.Read(noise)
	os.WriteFile(random, noise, 0o644)

	a, err := Describe(text, "podvisor", "amd64")
	if err != nil || a.Encoding != "gzip" || a.Size != 90000 || a.WireSize >= a.Size*9/10 {
		t.Fatalf("text: %+v %v", a, err)
	}
	// The wire bytes are made again identically, and decode to the file.
	r, err := Wire(text, a)
	if err != nil {
		t.Fatal(err)
	}
	wire, _ := io.ReadAll(r)
	r.Close()
	if sum := sha256.Sum256(wire); hex.EncodeToString(sum[:]) != a.WireSHA256 || int64(len(wire)) != a.WireSize {
		t.Fatalf("the wire bytes differ from those described")
	}
	zr, _ := gzip.NewReader(bytes.NewReader(wire))
	plain, _ := io.ReadAll(zr)
	if sum := sha256.Sum256(plain); hex.EncodeToString(sum[:]) != a.SHA256 {
		t.Fatal("the wire bytes do not decode to the file")
	}
	b, err := Describe(random, "podvisor", "amd64")
	if err != nil || b.Encoding != "" || b.WireSize != 0 || b.Size != 50000 {
		t.Fatalf("random: %+v %v", b, err)
	}
	if err := (&protocol.Release{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.0.0", Artifacts: []protocol.Artifact{a}}).Validate(); err != nil {
		t.Fatalf("the artifact does not validate: %v", err)
	}
}

func TestStorePutChecksAndPrunes(t *testing.T) {
	s := Store{Dir: t.TempDir()}
	data := []byte("artifact bytes")
	sum := sha256.Sum256(data)
	sha := hex.EncodeToString(sum[:])
	if err := s.Put(sha, int64(len(data))-1, bytes.NewReader(data)); err == nil || !strings.Contains(err.Error(), "bytes sent") {
		t.Fatalf("more bytes than the manifest says: %v", err)
	}
	if err := s.Put(sha, int64(len(data))+1, bytes.NewReader(data)); err == nil {
		t.Fatal("fewer bytes than the manifest says: stored")
	}
	if err := s.Put(strings.Repeat("0", 64), int64(len(data)), bytes.NewReader(data)); err == nil || !strings.Contains(err.Error(), "hash to") {
		t.Fatalf("wrong hash: %v", err)
	}
	if entries, _ := os.ReadDir(filepath.Join(s.Dir, "blobs")); len(entries) != 0 {
		t.Fatalf("refused uploads left %d files", len(entries))
	}
	if err := s.Put(sha, int64(len(data)), bytes.NewReader(data)); err != nil || !s.Has(sha, int64(len(data))) {
		t.Fatalf("put: %v", err)
	}
	if err := s.Prune(nil); err != nil || s.Has(sha, int64(len(data))) {
		t.Fatalf("prune kept an unnamed blob: %v", err)
	}
}
