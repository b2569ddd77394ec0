package safepath

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/prereq"
)

// tree makes a volume with a real directory and file, and an outside
// directory that links point to.
//
//	vol/dir/file, vol/dir/sub/, vol/abs -> <outside>, vol/rel -> ../outside,
//	vol/dir/up -> ../.., vol/inner -> dir, vol/dangling -> <outside>/new
func tree(t *testing.T) (vol, outside string) {
	t.Helper()
	base := t.TempDir()
	vol, outside = filepath.Join(base, "vol"), filepath.Join(base, "outside")
	for _, d := range []string{filepath.Join(vol, "dir", "sub"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	must(t, os.WriteFile(filepath.Join(vol, "dir", "file"), []byte("in"), 0o644))
	must(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("out"), 0o644))
	for link, target := range map[string]string{
		"abs": outside, "rel": "../outside", "dir/up": "../..", "inner": "dir", "dangling": filepath.Join(outside, "new"),
	} {
		must(t, os.Symlink(target, filepath.Join(vol, link)))
	}
	return vol, outside
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func openRoot(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := OpenTrusted(dir)
	must(t, err)
	t.Cleanup(func() { f.Close() })
	return f
}

// resolvedPath is where a descriptor really points.
func resolvedPath(t *testing.T, f *os.File) string {
	t.Helper()
	p, err := os.Readlink(ProcPath(f))
	must(t, err)
	return p
}

// opener is Open with openat2, or the per-component walk of kernels
// without it.
type opener func(root *os.File, rel string) (*os.File, error)

func openers() map[string]opener {
	return map[string]opener{
		"openat2": Open,
		"walk": func(root *os.File, rel string) (*os.File, error) {
			parts, err := components(rel)
			if err != nil {
				return nil, err
			}
			return walk(root, rel, parts, nil)
		},
	}
}

func TestOpenRefusesLinksAndEscapes(t *testing.T) {
	vol, _ := tree(t)
	for name, open := range openers() {
		root := openRoot(t, vol)
		for _, tc := range []struct {
			rel  string
			want error // nil: opens, inside the volume
		}{
			{"dir", nil},
			{"dir/file", nil},
			{"./dir//sub/", nil},
			{"", nil},
			{"abs", ErrSymlink},        // absolute link, last component
			{"abs/secret", ErrSymlink}, // absolute link, first component
			{"rel/secret", ErrSymlink}, // relative link out
			{"dir/up", ErrSymlink},     // link to .. in the middle of the tree
			{"dir/up/outside", ErrSymlink},
			{"inner/file", ErrSymlink}, // a link that stays inside is refused too
			{"dangling", ErrSymlink},
			{"..", ErrEscape},
			{"dir/../..", ErrEscape},
			{"dir/../dir", ErrEscape},
			{"/etc", ErrEscape},
			{"dir/file/x", unix.ENOTDIR},
			{"missing", unix.ENOENT},
		} {
			f, err := open(root, tc.rel)
			if tc.want == nil {
				if err != nil {
					t.Errorf("%s %q: %v", name, tc.rel, err)
					continue
				}
				if p := resolvedPath(t, f); p != vol && !strings.HasPrefix(p, vol+"/") {
					t.Errorf("%s %q resolved to %s, outside %s", name, tc.rel, p, vol)
				}
				f.Close()
				continue
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("%s %q: got %v, %v; want %v", name, tc.rel, f, err, tc.want)
			}
			var pe *Error
			if err != nil && !errors.As(err, &pe) {
				t.Errorf("%s %q: error %v does not say which component", name, tc.rel, err)
			}
			if f != nil {
				f.Close()
			}
		}
	}
}

func TestErrorNamesTheComponent(t *testing.T) {
	vol, _ := tree(t)
	_, err := Open(openRoot(t, vol), "dir/up/outside/secret")
	var pe *Error
	if !errors.As(err, &pe) || pe.Component != "dir/up" || !strings.Contains(err.Error(), `"dir/up" is a symbolic link`) {
		t.Fatalf("error %v: want it to name dir/up as the link", err)
	}
}

// MkdirAll creates what is missing through descriptors, with the mode
// asked for, and creates nothing through a link.
func TestMkdirAll(t *testing.T) {
	vol, outside := tree(t)
	root := openRoot(t, vol)
	f, err := MkdirAll(root, "dir/new/deeper", 0o777)
	must(t, err)
	f.Close()
	st, err := os.Stat(filepath.Join(vol, "dir", "new", "deeper"))
	if err != nil || !st.IsDir() || st.Mode().Perm() != 0o777 {
		t.Fatalf("created %v %v, want a directory with mode 0777 (the umask undone)", st, err)
	}
	for _, rel := range []string{"abs/created", "rel/created", "dir/up/outside/created", "dangling/x", "dir/file/x", "../created"} {
		if f, err := MkdirAll(root, rel, 0o755); err == nil {
			f.Close()
			t.Errorf("MkdirAll %q succeeded", rel)
		}
	}
	if entries, _ := os.ReadDir(outside); len(entries) != 1 {
		t.Fatalf("something was created outside the volume: %v", entries)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(vol), "created")); err == nil {
		t.Fatal("created beside the volume")
	}
}

func TestCreateAndWriteFile(t *testing.T) {
	vol, outside := tree(t)
	root := openRoot(t, vol)
	f, err := CreateFile(root, "dir/made", 0o600)
	must(t, err)
	f.Close()
	if st, err := os.Lstat(filepath.Join(vol, "dir", "made")); err != nil || !st.Mode().IsRegular() {
		t.Fatalf("CreateFile made %v %v", st, err)
	}
	must(t, WriteFile(root, "a/b/c", []byte("x"), 0o644))
	if b, err := os.ReadFile(filepath.Join(vol, "a", "b", "c")); err != nil || string(b) != "x" {
		t.Fatalf("WriteFile wrote %q %v", b, err)
	}
	// Through a dangling link, a link to a file, or a linked directory:
	// refused, and the outside untouched.
	for _, rel := range []string{"dangling", "abs/secret", "rel/secret"} {
		if f, err := CreateFile(root, rel, 0o644); err == nil {
			f.Close()
			t.Errorf("CreateFile %q succeeded", rel)
		}
		if err := WriteFile(root, rel, []byte("pwned"), 0o644); err == nil {
			t.Errorf("WriteFile %q succeeded", rel)
		}
	}
	if _, err := os.Lstat(filepath.Join(outside, "new")); err == nil {
		t.Fatal("a file was created through the dangling link")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "out" {
		t.Fatalf("the outside file was written: %q", b)
	}
}

// A descriptor held from resolution is what gets mounted: swapping the
// directory for a link to the outside afterwards changes nothing.
func TestBindAtMountsTheDescriptorNotThePath(t *testing.T) {
	prereq.Root(t, "mounting")
	vol, outside := tree(t)
	stage := filepath.Join(t.TempDir(), "stage")
	t.Cleanup(func() { Unbind(stage) })
	root := openRoot(t, vol)
	f, err := Open(root, "dir/sub")
	must(t, err)
	defer f.Close()
	must(t, os.WriteFile(filepath.Join(vol, "dir", "sub", "mine"), nil, 0o644))
	// The swap a container would race in between check and use.
	must(t, os.Rename(filepath.Join(vol, "dir", "sub"), filepath.Join(vol, "dir", "moved")))
	must(t, os.Symlink(outside, filepath.Join(vol, "dir", "sub")))

	must(t, BindAt(f, stage))
	if _, err := os.Stat(filepath.Join(stage, "mine")); err != nil {
		t.Fatalf("the staged bind is not the directory that was opened: %v", err)
	}
	if _, err := os.Stat(filepath.Join(stage, "secret")); err == nil {
		t.Fatal("the staged bind shows the outside directory")
	}
	// Binding again replaces the mount rather than stacking it, and a file
	// takes the place of a directory.
	file, err := Open(root, "dir/file")
	must(t, err)
	defer file.Close()
	must(t, BindAt(file, stage))
	if b, err := os.ReadFile(stage); err != nil || string(b) != "in" {
		t.Fatalf("the staged file reads %q %v", b, err)
	}
	must(t, Unbind(stage))
	if _, err := os.Lstat(stage); !os.IsNotExist(err) {
		t.Fatalf("Unbind left %s: %v", stage, err)
	}
	if mounted(t, stage) {
		t.Fatal("still mounted after Unbind")
	}
}

// mounted reports whether path appears in this process's mount table.
func mounted(t *testing.T, path string) bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}
