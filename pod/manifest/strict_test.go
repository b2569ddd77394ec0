package manifest

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/prereq"
)

// openManifest reports every step it took, links and all, from /, and
// reads the file it reached.
func TestOpenManifestWalksEveryStep(t *testing.T) {
	top := t.TempDir()
	m, other := filepath.Join(top, "m"), filepath.Join(top, "other")
	os.MkdirAll(m, 0o755)
	os.MkdirAll(filepath.Join(other, "sub"), 0o755)
	os.WriteFile(filepath.Join(other, "sub", "pod.yaml"), []byte(goodPod), 0o644)
	// a.yaml -> ../other/hop (relative) -> sub/pod.yaml (relative to other)
	os.Symlink("sub/pod.yaml", filepath.Join(other, "hop"))
	os.Symlink("../other/hop", filepath.Join(m, "a.yaml"))

	f, steps, err := openManifest(m, "a.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if data, _ := io.ReadAll(f); string(data) != goodPod {
		t.Fatalf("read %q", data)
	}
	var got []string
	for _, s := range steps {
		p := s.Path
		if s.Listed {
			p += " (listed)"
		}
		got = append(got, p)
	}
	want := []string{filepath.Join(m, "a.yaml"), top, other, filepath.Join(other, "hop"), filepath.Join(other, "sub"), filepath.Join(other, "sub", "pod.yaml")}
	tail := got[len(got)-len(want):]
	if got[0] != "/" || !strings.Contains(strings.Join(got, "\n"), m+" (listed)") || strings.Join(tail, "\n") != strings.Join(want, "\n") {
		t.Fatalf("steps:\n%s\nwant / first, %s listed, and ending:\n%s", strings.Join(got, "\n"), m, strings.Join(want, "\n"))
	}
	if last := steps[len(steps)-1]; !last.Mode.IsRegular() || last.Mode.Perm() != 0o644 {
		t.Fatalf("last step %+v, want the file", last)
	}
	// Every directory from / down to m was entered.
	for p := m; p != "/"; p = filepath.Dir(p) {
		if !strings.Contains(strings.Join(got, "\n")+"\n", p) {
			t.Errorf("no step for %s", p)
		}
	}
	os.Symlink("loop.yaml", filepath.Join(m, "loop.yaml"))
	if _, _, err := openManifest(m, "loop.yaml"); err == nil || !strings.Contains(err.Error(), "too many levels") {
		t.Fatalf("a link to itself: %v", err)
	}
}

// A file others can write, a manifest directory they can write (with or
// without the sticky bit), a link into a directory they can write: each is
// refused unread, shown Invalid with the reason, and a pod already running
// from the file keeps running.
func TestDirRefusesWhatOthersCanWrite(t *testing.T) {
	d, clock, log := testDir(t)
	uid := d.state().Pods[0].UID
	path := filepath.Join(d.Path, "web.yaml")
	os.WriteFile(path, []byte(strings.Replace(goodPod, "1000", "2000", 1)), 0o644)
	os.Chmod(path, 0o664)
	d.Load()
	clock.advance(2 * time.Second)
	st, _ := d.Load()
	if len(st.Pods) != 1 || st.Pods[0].UID != uid {
		t.Fatalf("the running pod must keep its trusted version: %+v", st.Pods)
	}
	if len(st.Invalid) != 1 || st.Invalid[0].File != path ||
		!strings.Contains(st.Invalid[0].Err.Error(), "refused, unread: file "+path+" is writable by group or others (mode 0664)") {
		t.Fatalf("invalid = %+v", st.Invalid)
	}
	if !strings.Contains(log.String(), "manifest rejected") {
		t.Fatalf("the refusal is not logged:\n%s", log)
	}
	os.Chmod(path, 0o644)
	if st, _ = d.Load(); len(st.Pods) != 1 || st.Pods[0].UID == uid || len(st.Invalid) != 0 {
		t.Fatalf("trusted again, the new content must be read: %+v", st)
	}

	for _, mode := range []os.FileMode{0o775, os.ModeSticky | 0o777} {
		os.Chmod(d.Path, mode)
		os.WriteFile(filepath.Join(d.Path, "new.yaml"), []byte(strings.Replace(goodPod, "name: web", "name: intruder", 1)), 0o644)
		st, _ = d.Load()
		if len(st.Pods) != 1 || st.Pods[0].Name != "web" {
			t.Fatalf("mode %v: pods %+v", mode, st.Pods)
		}
		var bad []string
		for _, b := range st.Invalid {
			bad = append(bad, b.File+": "+b.Err.Error())
		}
		if len(bad) != 1 || !strings.Contains(bad[0], "new.yaml: refused, unread: the manifest directory "+d.Path+" is writable by group or others") {
			t.Fatalf("mode %v: invalid = %q", mode, bad)
		}
		if !strings.Contains(log.String(), "every manifest is refused") {
			t.Fatalf("mode %v: the directory's refusal is not logged:\n%s", mode, log)
		}
		os.Remove(filepath.Join(d.Path, "new.yaml"))
		os.Chmod(d.Path, 0o755)
		clock.advance(time.Hour)
		d.Load()
	}

	open := t.TempDir()
	os.Chmod(open, 0o777)
	os.WriteFile(filepath.Join(open, "pod.yaml"), []byte(strings.Replace(goodPod, "name: web", "name: linked", 1)), 0o644)
	os.Symlink(filepath.Join(open, "pod.yaml"), filepath.Join(d.Path, "linked.yaml"))
	st, _ = d.Load()
	if len(st.Pods) != 1 || len(st.Invalid) != 1 ||
		!strings.Contains(st.Invalid[0].Err.Error(), "directory "+open+" is writable by group or others (mode 0777)") {
		t.Fatalf("a link into a world-writable directory: %+v", st)
	}
}

// security.allowUntrustedManifests: what would be refused is read, with a
// warning naming the reason.
func TestDirAllowUntrusted(t *testing.T) {
	d, _, log := testDir(t)
	d.AllowUntrusted = true
	os.Chmod(d.Path, os.ModeSticky|0o777)
	os.WriteFile(filepath.Join(d.Path, "new.yaml"), []byte(strings.Replace(goodPod, "name: web", "name: other", 1)), 0o666)
	os.Chmod(filepath.Join(d.Path, "new.yaml"), 0o666)
	st, _ := d.Load()
	if len(st.Pods) != 2 || len(st.Invalid) != 0 {
		t.Fatalf("with the opt-out both must run: %+v", st)
	}
	for _, want := range []string{
		"manifests are read although the manifest directory " + d.Path + " is writable",
		"manifest read although the manifest directory " + d.Path + " is writable",
		"security.allowUntrustedManifests",
	} {
		if !strings.Contains(log.String(), want) {
			t.Fatalf("no warning %q:\n%s", want, log)
		}
	}
}

// Owners count: a file, a link's target or a link another user owns is
// refused, though no mode lets anyone else write.
func TestDirRefusesForeignOwners(t *testing.T) {
	d, clock, _ := testDir(t)
	other := t.TempDir()
	os.Chmod(other, 0o755)
	target := filepath.Join(other, "pod.yaml")
	os.WriteFile(target, []byte(strings.Replace(goodPod, "name: web", "name: foreign", 1)), 0o644)
	if err := os.Chown(target, 4242, 4242); err != nil {
		prereq.Missing(t, "chown needs root: %v", err)
	}
	os.Symlink(target, filepath.Join(d.Path, "foreign.yaml"))
	own := filepath.Join(other, "own.yaml")
	os.WriteFile(own, []byte(strings.Replace(goodPod, "name: web", "name: own", 1)), 0o644)
	link := filepath.Join(d.Path, "own.yaml")
	os.Symlink(own, link)
	os.Lchown(link, 4242, 4242)
	plain := filepath.Join(d.Path, "plain.yaml")
	os.WriteFile(plain, []byte(strings.Replace(goodPod, "name: web", "name: plain", 1)), 0o644)
	os.Chown(plain, 65534, 65534)
	clock.advance(time.Hour)
	st, _ := d.Load()
	got := map[string]string{}
	for _, b := range st.Invalid {
		got[filepath.Base(b.File)] = b.Err.Error()
	}
	for name, want := range map[string]string{
		"foreign.yaml": "file " + target + " is owned by uid 4242, not root",
		"own.yaml":     "link " + link + " is owned by uid 4242, not root",
		"plain.yaml":   "file " + plain + " is owned by uid 65534, not root",
	} {
		if !strings.Contains(got[name], want) {
			t.Errorf("%s: %q, want %q", name, got[name], want)
		}
	}
	if len(st.Pods) != 1 || st.Pods[0].Name != "web" {
		t.Fatalf("pods %+v", st.Pods)
	}
}

// A chmod of the manifest directory itself is judged at once, not at the
// next resync: its files show as refused while their pods keep running.
func TestDirWatchJudgesTheDirectoryOnItsOwnChange(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "web.yaml"), []byte(goodPod), 0o644)
	d := &Dir{Path: dir, Resync: time.Hour, Settle: time.Millisecond, Confirm: time.Millisecond}
	if err := d.Watch(); err != nil {
		t.Fatal(err)
	}
	if st, _ := d.Load(); len(st.Pods) != 1 {
		t.Fatalf("load: %+v", st)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := make(chan State, 4)
	go d.Run(ctx, out)
	os.Chmod(dir, 0o777)
	st := receive(t, out)
	if len(st.Pods) != 1 || len(st.Invalid) != 1 || !strings.Contains(st.Invalid[0].Err.Error(), "the manifest directory "+dir+" is writable") {
		t.Fatalf("after chmod 0777 of the directory: %+v", st)
	}
}
