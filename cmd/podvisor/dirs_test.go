package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/test/prereq"
)

func TestPrivateDir(t *testing.T) {
	base := t.TempDir()
	fresh := filepath.Join(base, "a", "data")
	if err := privateDir("data directory", fresh); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(fresh); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("new directory: %v, %v; want 0700", st.Mode(), err)
	}
	open := filepath.Join(base, "open")
	os.Mkdir(open, 0o700)
	os.Chmod(open, 0o775)
	err := privateDir("data directory", open)
	if err == nil || !strings.Contains(err.Error(), open) || !strings.Contains(err.Error(), "-rwxrwxr-x") ||
		!strings.Contains(err.Error(), "writable by group or others") {
		t.Fatalf("group-writable directory: %v", err)
	}
	// A parent anyone may write to (without the sticky bit) lets them
	// swap the directory: refused, even for a directory to be made.
	swap := filepath.Join(base, "swap")
	os.Mkdir(swap, 0o700)
	os.Chmod(swap, 0o777)
	err = privateDir("data directory", filepath.Join(swap, "data"))
	if err == nil || !strings.Contains(err.Error(), "its parent "+swap) {
		t.Fatalf("under a world-writable parent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(swap, "data")); err == nil {
		t.Fatal("the directory was made under an unsafe parent")
	}
	// The sticky bit (/tmp) makes a world-writable parent safe.
	os.Chmod(swap, os.ModeSticky|0o777)
	if err := privateDir("data directory", filepath.Join(swap, "data")); err != nil {
		t.Fatalf("under a sticky parent: %v", err)
	}
	t.Run("owned by another user", func(t *testing.T) {
		prereq.Root(t, "chown to another user")
		foreign := filepath.Join(base, "foreign")
		os.Mkdir(foreign, 0o700)
		os.Chown(foreign, 4242, 4242)
		if err := privateDir("data directory", foreign); err == nil || !strings.Contains(err.Error(), "owned by another user") {
			t.Fatalf("foreign-owned directory: %v", err)
		}
	})
}
