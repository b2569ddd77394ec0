package podfs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/safepath"
	"github.com/podvisor/podvisor/test/prereq"
)

func TestAllowedRoot(t *testing.T) {
	allowed := []string{"/srv/data/", "/srv/data/inner", "/opt/app"}
	for _, tc := range []struct {
		path, root, rel string
		ok              bool
	}{
		{"/srv/data", "/srv/data", "", true},
		{"/srv/data/x/y", "/srv/data", "x/y", true},
		// The outermost allowed directory is the root: the inner one is
		// writable by pods that mount the outer.
		{"/srv/data/inner/z", "/srv/data", "inner/z", true},
		{"/opt/app/../../etc", "", "", false},
		{"/srv/database", "", "", false},
		{"/etc", "", "", false},
	} {
		root, rel, ok := allowedRoot(tc.path, allowed)
		if root != tc.root || rel != tc.rel || ok != tc.ok {
			t.Errorf("%s: got %q %q %v, want %q %q %v", tc.path, root, rel, ok, tc.root, tc.rel, tc.ok)
		}
	}
	if root, rel, ok := allowedRoot("/var/run/x", []string{"/"}); root != "/" || rel != "var/run/x" || !ok {
		t.Errorf("under /: got %q %q %v", root, rel, ok)
	}
}

func hostPathType(t v1.HostPathType) *v1.HostPathType { return &t }

// A link planted below an allowed directory is never followed: not to
// check, not to create.
func TestOpenAllowedHostPath(t *testing.T) {
	base := t.TempDir()
	allowed, outside := filepath.Join(base, "allowed"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(allowed, "real"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(allowed, "file"), nil, 0o644)
	os.Symlink(outside, filepath.Join(allowed, "link"))
	os.Symlink("real", filepath.Join(allowed, "inner"))
	for _, tc := range []struct {
		rel     string
		typ     v1.HostPathType
		wantErr string
	}{
		{"", v1.HostPathDirectory, ""},
		{"real", v1.HostPathDirectory, ""},
		{"real/made/deeper", v1.HostPathDirectoryOrCreate, ""},
		{"real/new-file", v1.HostPathFileOrCreate, ""},
		{"file", v1.HostPathFile, ""},
		{"file", v1.HostPathDirectory, "is not a Directory"},
		{"real", v1.HostPathFile, "is not a File"},
		{"link", v1.HostPathUnset, "is a symbolic link"},
		{"link", v1.HostPathDirectory, "is a symbolic link"},
		{"link/created", v1.HostPathDirectoryOrCreate, "is a symbolic link"},
		{"link/created-file", v1.HostPathFileOrCreate, "is a symbolic link"},
		{"inner", v1.HostPathDirectory, "is a symbolic link"},
	} {
		f, err := openAllowedHostPath(allowed, tc.rel, hostPathType(tc.typ))
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%q (%s): %v", tc.rel, tc.typ, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%q (%s): error %v, want %q", tc.rel, tc.typ, err, tc.wantErr)
		}
		if f != nil {
			f.Close()
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 0 {
		t.Fatalf("created outside the allowed directory: %v", entries)
	}
	if st, err := os.Stat(filepath.Join(allowed, "real", "made", "deeper")); err != nil || !st.IsDir() {
		t.Fatalf("DirectoryOrCreate: %v", err)
	}
}

// Cleaning a pod's staged mounts unmounts them and removes only the
// mount points: the files they showed stay where they are.
func TestCleanStagedMounts(t *testing.T) {
	prereq.Root(t, "mounting")
	base := t.TempDir()
	src, pod := filepath.Join(base, "hostdir"), filepath.Join(base, "pod")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "keep"), []byte("x"), 0o644)
	target := filepath.Join(pod, stagedMountsDir, "vol", "app", "0")
	os.MkdirAll(filepath.Dir(target), 0o750)
	f, err := safepath.OpenTrusted(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	t.Cleanup(func() { safepath.Unbind(target) })
	if err := safepath.BindAt(f, target); err != nil {
		t.Fatal(err)
	}
	if err := cleanStagedMounts(pod); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(src, "keep")); err != nil {
		t.Fatalf("the bound directory lost its file: %v", err)
	}
	if _, err := os.Stat(filepath.Join(pod, stagedMountsDir)); !os.IsNotExist(err) {
		t.Fatalf("staging directory left: %v", err)
	}
}
