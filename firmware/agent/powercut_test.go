package agent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// The power-cut tests run the install in a child (this test binary again)
// that SIGKILLs itself at one step; the parent then starts the device
// again (the launcher, the retained order) and checks what it runs.
const (
	envCrashAt = "AGENT_TEST_CRASH_AT"
	envDir     = "AGENT_TEST_DIR"
	envLaunch  = "AGENT_TEST_LAUNCH"
)

func TestMain(m *testing.M) {
	if step := os.Getenv(envCrashAt); step != "" {
		powerCutChild(step, os.Getenv(envDir))
		fmt.Fprintf(os.Stderr, "step %s was never reached\n", step)
		os.Exit(3)
	}
	if os.Getenv(envLaunch) != "" {
		launchChild(os.Getenv(envDir))
	}
	os.Exit(m.Run())
}

// crashSteps are where the child dies, in the order they happen.
var crashSteps = []string{
	"download",        // mid-file
	"verified",        // every download checked, nothing staged
	"write",           // mid-write of a decoded binary in the .tmp slot
	"staged",          // slot renamed into place, links untouched
	"between-renames", // previous switched, current not yet
	"switched",        // current is the new slot, before the restart
	"launched",        // the launcher counted the new slot's start, the daemon died before its commit
	"committed",       // slot.json committed, before the report
}

// powerCutRelease is the release both processes build, byte for byte.
func powerCutRelease(t testing.TB, hub *fakeHub) *release {
	return newRelease(t, hub, "v1.3.0", "arm64", 256<<10, 42)
}

func powerCutChild(step, dir string) {
	crashPoint = func(at string) {
		if at == step {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // the signal is on its way
		}
	}
	t := &testing.T{}
	hub := &fakeHub{}
	r := powerCutRelease(t, hub)
	u := newUpdater(dir, "v1.2.0", hub)
	install(u, r.order(t, 1))
	// The daemon restarts through the launcher, which counts the start.
	if _, _, err := Prepare(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(4)
	}
	crashPoint("launched")
	u13 := newUpdater(dir, "v1.3.0", hub)
	cur, _ := u13.layout.Linked(linkCurrent)
	ready := make(chan struct{})
	close(ready)
	u13.gate(context.Background(), cur, GateSignals{Ready: ready})
}

// stageCommitted makes a committed slot of version in dir, current.
func stageCommitted(t *testing.T, dir, version string) *release {
	r := newRelease(t, nil, version, "arm64", 128<<10, 7)
	l := NewLayout(dir)
	name := SlotName(version, r.rel.Artifacts[0].SHA256)
	if err := os.MkdirAll(l.slotDir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := Record{Version: version, Order: 0, State: StateCommitted}
	for _, a := range r.rel.Artifacts {
		if err := os.WriteFile(filepath.Join(l.slotDir(name), a.Name), r.files[a.Name], 0o755); err != nil {
			t.Fatal(err)
		}
		rec.Files = append(rec.Files, File{Name: a.Name, Size: a.Size, SHA256: a.SHA256})
	}
	if err := writeRecord(l.slotDir(name), rec); err != nil {
		t.Fatal(err)
	}
	if err := l.setLink(linkCurrent, name); err != nil {
		t.Fatal(err)
	}
	return r
}

// boots runs the launcher's decision on dir and checks that what it would
// execute is a complete, verified slot (every file as its slot.json says)
// or the packaged binary; it returns the version ("factory" for the
// packaged binary).
func boots(t *testing.T, dir string) string {
	t.Helper()
	path, d, err := Prepare(dir)
	if err != nil {
		t.Fatalf("launcher: %v", err)
	}
	if path == "" {
		if d.Action != Continue {
			t.Fatalf("launcher decided %+v without a path", d)
		}
		if _, err := os.Lstat(filepath.Join(dir, "agent", "current")); err == nil {
			t.Fatal("the launcher runs the packaged binary while current names a slot")
		}
		return "factory"
	}
	s, err := NewLayout(dir).open(filepath.Base(filepath.Dir(path)))
	if err != nil {
		t.Fatalf("the launcher would execute %s, whose slot is broken: %v", path, err)
	}
	for _, f := range s.Record.Files {
		got, err := fileSHA256(filepath.Join(s.Dir, f.Name))
		if err != nil || got != f.SHA256 {
			t.Fatalf("the launcher would execute slot %s whose %s has SHA-256 %s (%v), slot.json says %s", s.Name, f.Name, got, err, f.SHA256)
		}
	}
	return s.Record.Version
}

// Power cut at every step of an install, from the packaged binary and from
// a committed slot: the device always starts a complete, verified version,
// the retained order sent again completes the update, and a new version
// that keeps dying before its commit is rolled back by the launcher.
func TestPowerCut(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"factory", "v1.2.0"} {
		for _, step := range crashSteps {
			t.Run(from+"/"+step, func(t *testing.T) {
				dir := t.TempDir()
				if from != "factory" {
					stageCommitted(t, dir, from)
				}
				cmd := exec.Command(self)
				cmd.Env = append(os.Environ(), envCrashAt+"="+step, envDir+"="+dir)
				out, err := cmd.CombinedOutput()
				if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
					t.Fatalf("the child did not die at %s: %v\n%s", step, err, out)
				}

				// The device starts again: the launcher picks a whole version.
				got := boots(t, dir)
				want := from
				switch step {
				case "switched", "launched", "committed":
					want = "v1.3.0"
				}
				if got != want {
					t.Fatalf("after a cut at %s the device starts %s, want %s", step, got, want)
				}

				// The hub's retained order arrives again: the update completes.
				hub := &fakeHub{}
				r := powerCutRelease(t, hub)
				u := newUpdater(dir, got, hub)
				if got == "factory" {
					u.o.Version = "v1.2.0"
				}
				u.Start(t.Context(), GateSignals{})
				install(u, r.order(t, 1))
				var wire int64
				for _, a := range r.rel.Artifacts {
					_, size := a.Transfer()
					wire += size
				}
				if step == "download" && (hub.sent == 0 || hub.sent >= wire) {
					t.Fatalf("after a cut mid-download %d of %d bytes were sent again; want the rest only", hub.sent, wire)
				}
				if step == "committed" {
					assertCurrentIs(t, dir, r, StateCommitted)
					return
				}
				cur := assertCurrentIs(t, dir, r, StateTrial)
				for _, e := range mustReadDir(t, u.layout.slots()) {
					if strings.HasSuffix(e, ".tmp") {
						t.Fatalf("a half-written slot was left: %s", e)
					}
				}
				// The new version never becomes ready: each start is counted,
				// then the launcher rolls back to what ran before.
				for i := 0; ; i++ {
					v := boots(t, dir)
					if v != "v1.3.0" {
						if v != from {
							t.Fatalf("rolled back to %s, want %s", v, from)
						}
						break
					}
					if i > Tries {
						t.Fatalf("still starting v1.3.0 after %d starts", i)
					}
				}
				failed := NewLayout(dir).Failed()
				if len(failed) != 1 || failed[0].Name != cur.Name ||
					!strings.Contains(failed[0].Record.LastError, "v1.3.0 started 2 times without becoming ready") {
					t.Fatalf("failed slots %+v; want %s with the launcher's reason", failed, cur.Name)
				}
			})
		}
	}
}

func mustReadDir(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// launchChild is the launcher as `podvisor run` calls it; once the exec
// happened (or none was due) it prints its PID and binary.
func launchChild(dir string) {
	if _, err := Run(dir, os.Args[1:], nil); err != nil {
		fmt.Println("error:", err)
		os.Exit(5)
	}
	self, _ := Self()
	fmt.Printf("pid=%d exe=%s launcher=%s args=%s\n", os.Getpid(), self, os.Getenv(EnvLauncher), strings.Join(os.Args[1:], " "))
	os.Exit(0)
}

// A slot that cannot be executed is rolled back with the reason, and the
// packaged binary runs on.
func TestLauncherRollsBackWhatCannotExec(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	l := NewLayout(dir)
	bin := []byte("\x7fELF not really")
	name := SlotName("v1.3.0", sum(bin))
	os.MkdirAll(l.slotDir(name), 0o700)
	os.WriteFile(filepath.Join(l.slotDir(name), Binary), bin, 0o644) // no x bit: as on a noexec mount
	rec := Record{Version: "v1.3.0", Order: 1, State: StateTrial, TriesLeft: Tries,
		Files: []File{{Name: Binary, Size: int64(len(bin)), SHA256: sum(bin)}}}
	if err := writeRecord(l.slotDir(name), rec); err != nil {
		t.Fatal(err)
	}
	if err := l.setLink(linkCurrent, name); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(), envLaunch+"=1", envDir+"="+dir)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("launcher child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), fmt.Sprintf("pid=%d exe=%s ", cmd.Process.Pid, self)) {
		t.Fatalf("the child says %s; want the packaged binary running on", out)
	}
	assertNoCurrent(t, dir)
	s, err := l.open(name)
	if err != nil || s.Record.State != StateFailed || !strings.Contains(s.Record.LastError, "permission denied") {
		t.Fatalf("slot %+v (%v); want failed with the exec's error", s, err)
	}
}

// The launcher really executes the current slot's binary in the same
// process: same PID, same arguments, the launcher's path in the
// environment; and a trial slot's start is counted.
func TestLauncherExecs(t *testing.T) {
	self, err := Self()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	l := NewLayout(dir)
	name := SlotName("v1.3.0", sum(bin))
	if err := os.MkdirAll(l.slotDir(name), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.slotDir(name), Binary), bin, 0o755); err != nil {
		t.Fatal(err)
	}
	rec := Record{Version: "v1.3.0", Order: 1, State: StateTrial, TriesLeft: Tries,
		Files: []File{{Name: Binary, Size: int64(len(bin)), SHA256: sum(bin)}}}
	if err := writeRecord(l.slotDir(name), rec); err != nil {
		t.Fatal(err)
	}
	if err := l.setLink(linkCurrent, name); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$", "--config", "/etc/podvisor/x.yaml")
	env := []string{envLaunch + "=1", envDir + "=" + dir}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, EnvLauncher+"=") {
			env = append(env, e)
		}
	}
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("launcher child: %v\n%s", err, out)
	}
	want := fmt.Sprintf("pid=%d exe=%s launcher=%s args=-test.run=^$ --config /etc/podvisor/x.yaml\n",
		cmd.Process.Pid, filepath.Join(l.slotDir(name), Binary), self)
	if resolved, err := filepath.EvalSymlinks(l.slotDir(name)); err == nil {
		want = strings.Replace(want, l.slotDir(name), resolved, 1)
	}
	if string(out) != want {
		t.Fatalf("the child says\n%s want\n%s", out, want)
	}
	s, err := l.open(name)
	if err != nil || s.Record.TriesLeft != Tries-1 {
		t.Fatalf("slot after the start: %+v, %v; want one try counted", s, err)
	}
}
