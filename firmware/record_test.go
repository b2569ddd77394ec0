package firmware

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestRecord(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "firmware")
	if r, err := LoadRecord(dir, "rauc"); r != nil || err != nil {
		t.Fatalf("no record: %v %v", r, err)
	}
	want := Record{Driver: "rauc", Slot: "rootfs.1", Version: "2.0", BootID: "b1", Time: time.Unix(100, 0).UTC()}
	if err := SaveRecord(dir, want); err != nil {
		t.Fatal(err)
	}
	got, err := LoadRecord(dir, "rauc")
	if err != nil || *got != want {
		t.Fatalf("got %+v %v, want %+v", got, err, want)
	}
	if err := RemoveRecord(dir, "rauc"); err != nil {
		t.Fatal(err)
	}
	if err := RemoveRecord(dir, "rauc"); err != nil {
		t.Fatal(err)
	}
	if r, _ := LoadRecord(dir, "rauc"); r != nil {
		t.Fatalf("record left: %+v", r)
	}
	if err := os.WriteFile(recordPath(dir, "swupdate"), []byte(strings.Repeat("x", maxRecord+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRecord(dir, "swupdate"); err == nil || !strings.Contains(err.Error(), "larger than 4096 bytes") {
		t.Errorf("oversized record: %v", err)
	}
	if err := os.WriteFile(recordPath(dir, "swupdate"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadRecord(dir, "swupdate"); err == nil || !strings.Contains(err.Error(), "swupdate-install.json") {
		t.Errorf("bad record: %v", err)
	}
}

func TestBootID(t *testing.T) {
	f := filepath.Join(t.TempDir(), "boot_id")
	os.WriteFile(f, []byte("abc\n"), 0o600)
	if id, err := BootID(f); id != "abc" || err != nil {
		t.Errorf("%q %v", id, err)
	}
	os.WriteFile(f, nil, 0o600)
	if _, err := BootID(f); err == nil {
		t.Error("empty boot ID accepted")
	}
}
