package shim

import (
	"github.com/podvisor/podvisor/test/prereq"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// anyDirIsMemory lets the test's directories, on whatever file system,
// hold private specs.
func anyDirIsMemory(t *testing.T) {
	was := memoryBacked
	memoryBacked = func(string) error { return nil }
	t.Cleanup(func() { memoryBacked = was })
}

// A spec with a private file keeps its command and Secret variables out
// of spec.json; ReadSpec gives back the whole spec.
func TestPrivateSpec(t *testing.T) {
	anyDirIsMemory(t)
	dir, privDir := t.TempDir(), t.TempDir()
	if memoryBacked(privDir) == nil {
		// /tmp is a tmpfs here: a directory beside the test, on disk.
		d, err := os.MkdirTemp(".", "privatespec-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		privDir = d
	}
	spec := Spec{InstanceID: "i1", Argv: []string{"run", "--pw=s3cret"}, Env: []string{"PATH=/bin", "PW=s3cret", "MODE=prod"},
		PrivateFile: filepath.Join(privDir, "i1.json"), SecretEnv: map[string]bool{"PW": true}}
	if err := WriteSpec(dir, spec); err != nil {
		t.Fatal(err)
	}
	public, _ := os.ReadFile(filepath.Join(dir, SpecFile))
	if strings.Contains(string(public), "s3cret") || strings.Contains(string(public), `"argv":["run"`) {
		t.Fatalf("spec.json holds the command or a Secret: %s", public)
	}
	var old Spec // what a shim that knows no private file reads
	if err := ReadJSON(filepath.Join(dir, SpecFile), &old); err != nil || len(old.Argv) != 0 || !slices.Equal(old.Env, []string{"PATH=/bin", "MODE=prod"}) {
		t.Fatalf("spec.json alone: %v, argv %q env %q", err, old.Argv, old.Env)
	}
	got, err := ReadSpec(dir)
	if err != nil || !slices.Equal(got.Argv, spec.Argv) || !slices.Equal(got.Env, spec.Env) {
		t.Fatalf("ReadSpec: %v, argv %q env %q", err, got.Argv, got.Env)
	}

	// Another instance's file, a file others may read, a link, none:
	// refused, naming the file.
	other := spec
	other.InstanceID = "i2"
	if err := WriteSpec(t.TempDir(), other); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSpec(dir); err == nil || !strings.Contains(err.Error(), `names instance "i2"`) {
		t.Fatalf("another instance's private spec: %v", err)
	}
	WriteSpec(dir, spec)
	os.Chmod(spec.PrivateFile, 0o644)
	if _, err := ReadSpec(dir); err == nil || !strings.Contains(err.Error(), "mode 0600") {
		t.Fatalf("a private spec others may read: %v", err)
	}
	os.Rename(spec.PrivateFile, spec.PrivateFile+".real")
	os.Chmod(spec.PrivateFile+".real", 0o600)
	os.Symlink(spec.PrivateFile+".real", spec.PrivateFile)
	if _, err := ReadSpec(dir); err == nil {
		t.Fatal("a private spec through a link was read")
	}
	os.Remove(spec.PrivateFile)
	if _, err := ReadSpec(dir); err == nil || !strings.Contains(err.Error(), spec.PrivateFile) || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("a missing private spec: %v", err)
	}
}

// The keeper runs a spec's private command and environment; one whose
// private file is gone (a tmpfs lost, a spec from elsewhere) does not
// start without them, nor does one that names no command at all (what a
// keeper that knows no private file sees).
func TestKeeperStartsPrivateSpec(t *testing.T) {
	anyDirIsMemory(t)
	sleep := lookPath(t, "sleep")
	k := newTestKeeper(t)
	privDir := t.TempDir()
	private := func(id string) *os.File {
		lock := newTestInstance(t, k, id, sleep, "100")
		dir := filepath.Join(k.dir, InstancesDir, id)
		var spec Spec
		if err := ReadJSON(filepath.Join(dir, SpecFile), &spec); err != nil {
			t.Fatal(err)
		}
		spec.Env, spec.SecretEnv = []string{"PW=s3cret", "MODE=prod"}, map[string]bool{"PW": true}
		spec.PrivateFile = filepath.Join(privDir, id+".json")
		if err := WriteSpec(dir, spec); err != nil {
			t.Fatal(err)
		}
		return lock
	}
	serveForks := func() {
		go func() {
			r := <-k.forks
			r.done <- k.fork(r.k)
		}()
	}
	lock := private("a")
	serveForks()
	st, err := startKept(t, k, "a", lock)
	if err != nil {
		t.Fatal(err)
	}
	environ, _ := os.ReadFile("/proc/" + strconv.Itoa(st.LeaderPid) + "/environ")
	if !strings.Contains(string(environ), "PW=s3cret\x00") || !strings.Contains(string(environ), "MODE=prod\x00") {
		t.Fatalf("the container's environment: %q", environ)
	}

	lock = private("gone")
	os.Remove(filepath.Join(privDir, "gone.json"))
	if st, err := startKept(t, k, "gone", lock); err == nil || !strings.Contains(err.Error(), "private spec") {
		t.Fatalf("started without its private spec: %+v, %v", st, err)
	}
	lock = private("nocmd")
	var spec Spec
	specPath := filepath.Join(k.dir, InstancesDir, "nocmd", SpecFile)
	ReadJSON(specPath, &spec)
	spec.PrivateFile = "" // as a keeper that knows no private file reads it
	WriteJSONAtomic(specPath, spec)
	if st, err := startKept(t, k, "nocmd", lock); err == nil || !strings.Contains(err.Error(), "no command") {
		t.Fatalf("started without a command: %+v, %v", st, err)
	}
	var exit ExitStatus
	if err := ReadJSON(filepath.Join(k.dir, InstancesDir, "nocmd", ExitFile), &exit); err != nil || exit.Reason != "StartError" {
		t.Fatalf("exit %+v, %v", exit, err)
	}
}

// A private spec is written only to a memory-backed file system.
func TestPrivateSpecOnlyInMemory(t *testing.T) {
	dir, privDir := t.TempDir(), t.TempDir()
	if memoryBacked(privDir) == nil {
		// /tmp is a tmpfs here: a directory beside the test, on disk.
		d, err := os.MkdirTemp(".", "privatespec-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(d) })
		privDir = d
	}
	spec := Spec{InstanceID: "i1", Argv: []string{"run"}, Env: []string{"PW=s3cret"},
		PrivateFile: filepath.Join(privDir, "i1.json"), SecretEnv: map[string]bool{"PW": true}}
	if memoryBacked(privDir) == nil {
		prereq.Missing(t, "no directory on a disk-backed file system for the test (%s is memory-backed)", privDir)
	}
	if err := WriteSpec(dir, spec); err == nil || !strings.Contains(err.Error(), "not on a memory-backed file system") {
		t.Fatalf("a private spec written to disk: %v", err)
	}
	if entries, _ := os.ReadDir(privDir); len(entries) > 0 {
		t.Fatalf("written: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(dir, SpecFile)); err == nil {
		t.Fatal("spec.json written without its private spec")
	}
}
