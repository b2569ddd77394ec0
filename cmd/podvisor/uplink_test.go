package main

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/sync/seal"
)

// Without hub.sealKey a device makes its sealing key once, 0600, in its
// data directory, and keeps it; a configured key file is read, and one
// others may read is refused.
func TestLoadSealKey(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	k1, err := loadSealKey("", dir, log)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "seal.key"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seal.key: %v %v, want mode 0600", st, err)
	}
	k2, err := loadSealKey("", dir, log)
	if err != nil || !k1.Public().Equal(k2.Public()) {
		t.Fatalf("a second start made another key: %v", err)
	}
	bundle := filepath.Join(t.TempDir(), "seal.key")
	k3, _ := seal.GenerateKey()
	b, _ := seal.MarshalPrivateKey(k3)
	os.WriteFile(bundle, b, 0o644)
	if _, err := loadSealKey(bundle, dir, log); err == nil || !strings.Contains(err.Error(), "hub sealKey") || !strings.Contains(err.Error(), "0600") {
		t.Fatalf("a key file others may read: %v", err)
	}
	os.Chmod(bundle, 0o600)
	if k, err := loadSealKey(bundle, dir, log); err != nil || !k.Public().Equal(k3.Public()) {
		t.Fatalf("the bundle's key: %v", err)
	}
}
