package e2e

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/protocol"
)

// The self-update end-to-end test's parts: podvisor builds stamped with
// release versions, a stand-in for systemd's Restart=always, and readers
// of what the hub and the device's slots say.

// suVersions are the builds of the test, all from this tree: the device's
// first version, a good update, a broken one (podvisor_testbroken: its
// run exits at start), and another good one for the power cuts.
var suVersions = []struct{ version, tags string }{
	{"v0.26.1", ""},
	{"v0.26.2", ""},
	{"v0.26.3", "podvisor_testbroken"},
	{"v0.26.4", ""},
}

var (
	suOnce   sync.Once
	suDir    string
	suErr    error
	suBuildT time.Duration
)

// suBuilds builds, once per test run, each of suVersions as release.sh
// does (packaging/buildflags.sh, -trimpath, -s -w, stamped with the
// version) into DIR/VERSION/: podvisor and podvisor-shim, so that each
// version's keeper is another (a keeper's version is its binary's hash) and
// an update hands containers from one keeper to the next, as a real release
// does; and podvisor-containerd, which the process pods do not use, built
// once and linked into each. On a warm Go build cache only the links run.
// It returns DIR.
func suBuilds(t *testing.T) string {
	t.Helper()
	if os.Getenv("PODVISOR_E2E_BIN") != "" {
		prerequisite(t, "the release versions are built from the tree; PODVISOR_E2E_BIN runs prebuilt binaries only")
	}
	if _, err := exec.LookPath("go"); err != nil {
		prerequisite(t, "go, to build the release versions: %v", err)
	}
	suOnce.Do(func() {
		start := time.Now()
		suDir = filepath.Join(filepath.Dir(binary), "selfupdate") // removed with the harness's binaries
		suErr = buildSelfUpdateVersions(repoRoot(t), suDir)
		suBuildT = time.Since(start)
	})
	if suErr != nil {
		t.Fatal(suErr)
	}
	t.Logf("release builds %v in %s (built in %v)", versionNames(), suDir, suBuildT.Round(time.Millisecond))
	return suDir
}

func versionNames() []string {
	var out []string
	for _, v := range suVersions {
		out = append(out, v.version)
	}
	return out
}

func buildSelfUpdateVersions(root, dir string) error {
	build := func(cmd, out, ldflags string, tags ...string) error {
		flags, err := exec.Command("sh", append([]string{filepath.Join(root, "packaging", "buildflags.sh"), cmd}, tags...)...).Output()
		if err != nil {
			return fmt.Errorf("packaging/buildflags.sh %s: %w", cmd, err)
		}
		args := append([]string{"build", "-trimpath", "-ldflags", ldflags, "-o", out}, strings.Fields(string(flags))...)
		c := exec.Command("go", append(args, "./cmd/"+cmd)...)
		c.Dir = root
		c.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := c.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s (%s): %w\n%s", cmd, ldflags, err, b)
		}
		return nil
	}
	for _, v := range append(versionNames(), "common") {
		if err := os.MkdirAll(filepath.Join(dir, v), 0o755); err != nil {
			return err
		}
	}
	common := filepath.Join(dir, "common", "podvisor-containerd")
	if err := build("podvisor-containerd", common, "-s -w"); err != nil {
		return err
	}
	for _, v := range suVersions {
		vdir := filepath.Join(dir, v.version)
		ldflags := "-s -w -X main.version=" + v.version
		var tags []string
		if v.tags != "" {
			tags = append(tags, v.tags)
		}
		if err := build("podvisor", filepath.Join(vdir, "podvisor"), ldflags, tags...); err != nil {
			return err
		}
		if err := build("podvisor-shim", filepath.Join(vdir, "podvisor-shim"), ldflags); err != nil {
			return err
		}
		if err := os.Link(common, filepath.Join(vdir, "podvisor-containerd")); err != nil {
			return err
		}
	}
	return nil
}

// releaseFilesOf are podhub release push's --file flags for one build.
func releaseFilesOf(dir, version string) []string {
	var files []string
	for _, name := range protocol.AgentArtifacts {
		files = append(files, "--file", filepath.Join(dir, version, name))
	}
	return files
}

// copyFile copies src to dst with mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// serviceLoop stands in for systemd's Restart=always (RestartSec) of
// packaging/systemd/podvisor.service: it runs the same command again each
// time it exits, after a delay, a bounded number of times, and logs every
// restart. On a device systemd does this; the systemd VM test (test/vm)
// runs the update through the real unit. The daemon's output goes to a
// file, as the journal would take it: nothing waits on a pipe that the
// daemon's keeper could hold open.
type serviceLoop struct {
	t       *testing.T
	argv    []string
	logPath string
	delay   time.Duration
	limit   int // restarts at most

	mu       sync.Mutex
	proc     *os.Process
	starts   int
	stopping bool
	exits    []string // how each run ended
	done     chan struct{}
}

func startServiceLoop(t *testing.T, logPath string, delay time.Duration, limit int, argv ...string) *serviceLoop {
	s := &serviceLoop{t: t, argv: argv, logPath: logPath, delay: delay, limit: limit, done: make(chan struct{})}
	started := make(chan error, 1)
	go s.run(started)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

func (s *serviceLoop) run(started chan<- error) {
	defer close(s.done)
	logf, err := os.OpenFile(s.logPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		started <- err
		return
	}
	defer logf.Close()
	for {
		cmd := exec.Command(s.argv[0], s.argv[1:]...)
		// A fresh environment per start, as systemd gives: no launcher
		// recorded by an earlier run.
		cmd.Env = withoutEnv(os.Environ(), "PODVISOR_LAUNCHER")
		cmd.Stdout, cmd.Stderr = logf, logf
		s.mu.Lock()
		if s.stopping {
			s.mu.Unlock()
			if started != nil {
				started <- nil
			}
			return
		}
		err := cmd.Start()
		if err == nil {
			s.proc = cmd.Process
			s.starts++
			fmt.Fprintf(logf, "=== service loop: start %d, pid %d\n", s.starts, cmd.Process.Pid)
		}
		s.mu.Unlock()
		if started != nil {
			started <- err
			started = nil
		}
		if err != nil {
			return
		}
		werr := cmd.Wait()
		s.mu.Lock()
		end := fmt.Sprintf("pid %d: %v", cmd.Process.Pid, werr)
		if werr == nil {
			end = fmt.Sprintf("pid %d: exit status 0", cmd.Process.Pid)
		}
		s.exits = append(s.exits, end)
		s.proc = nil
		stop, n := s.stopping, s.starts
		s.mu.Unlock()
		fmt.Fprintf(logf, "=== service loop: %s\n", end)
		if stop {
			return
		}
		if n > s.limit {
			fmt.Fprintf(logf, "=== service loop: %d starts, giving up (systemd's start limit)\n", n)
			return
		}
		s.t.Logf("service loop: the daemon ended (%s); restarting it in %v, as systemd's Restart=always does", end, s.delay)
		time.Sleep(s.delay)
	}
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// pid is the running daemon's pid, 0 between two runs.
func (s *serviceLoop) pid() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	return s.proc.Pid
}

// restarts is how many times the loop started the daemon again.
func (s *serviceLoop) restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts - 1
}

func (s *serviceLoop) ended() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.exits...)
}

// kill9 is a power cut of the daemon alone: SIGKILL, no chance to write
// anything; the loop starts it again.
func (s *serviceLoop) kill9() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		return 0
	}
	s.proc.Signal(syscall.SIGKILL)
	return s.proc.Pid
}

// stop ends the loop and its daemon (SIGKILL; the daemon's cleanup kills
// the keepers).
func (s *serviceLoop) stop() {
	s.mu.Lock()
	s.stopping = true
	if s.proc != nil {
		s.proc.Signal(syscall.SIGKILL)
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		s.t.Errorf("the service loop did not end within 30 s of its daemon's SIGKILL")
	}
}

// log is the daemon's output over every run.
func (s *serviceLoop) log() string {
	b, _ := os.ReadFile(s.logPath)
	return string(b)
}
