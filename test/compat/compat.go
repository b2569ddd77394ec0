// Package compat builds the previous release's binaries (podvisor,
// podvisor-shim, podvisor-containerd) for the tests that prove an agent
// update, or a downgrade, restarts no pod. The release is the commit named
// in test/compat/previous-release; its binaries are built from that
// commit's own tree with its own packaging/buildflags.sh, stamped with its
// version, and cached under the repository's bin/compat/<commit> so only
// the first run builds them.
package compat

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// Commands are the binaries of a release that outlive or serve pods.
var Commands = []string{"podvisor", "podvisor-shim", "podvisor-containerd"}

// ErrUnavailable wraps what keeps the previous release from being built
// here (no git, a shallow clone without the commit): a missing
// prerequisite, not a failure of the code under test.
var ErrUnavailable = errors.New("the previous release cannot be built here")

// Release is a built release: its commit, version stamp and the directory
// holding its binaries side by side, as installed.
type Release struct {
	Commit  string // full hash
	Version string // what its podvisor version prints
	Dir     string
}

// Repo is the repository root this package is in.
func Repo() string {
	_, self, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(self), "..", "..")
}

// PreviousCommit reads the commit named in test/compat/previous-release.
func PreviousCommit(repo string) (string, error) {
	path := filepath.Join(repo, "test", "compat", "previous-release")
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.ContainsAny(line, " \t") || strings.HasPrefix(line, "-") || len(line) > 100 {
			return "", fmt.Errorf("%s: %q is not one commit", path, line)
		}
		return line, nil
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return "", fmt.Errorf("%s names no commit", path)
}

// OverrideEnv names another commit to stand for the previous release, to
// try an update from (and back to) any older commit.
const OverrideEnv = "PODVISOR_COMPAT_RELEASE"

// Previous returns the previous release's binaries (or those of the
// commit $PODVISOR_COMPAT_RELEASE names), building them first unless
// bin/compat/<commit> already holds them.
func Previous() (Release, error) {
	repo := Repo()
	ref, source := os.Getenv(OverrideEnv), "$"+OverrideEnv
	if ref == "" {
		var err error
		if ref, err = PreviousCommit(repo); err != nil {
			return Release{}, err
		}
		source = "test/compat/previous-release"
	} else if strings.HasPrefix(ref, "-") {
		return Release{}, fmt.Errorf("%s=%q is not a commit", source, ref)
	}
	rel, err := Build(repo, ref)
	if err != nil {
		return rel, fmt.Errorf("%s: %w", source, err)
	}
	return rel, nil
}

// Build returns the binaries of commit ref of repo, built once into
// repo/bin/compat/<full hash>.
func Build(repo, ref string) (Release, error) {
	if _, err := exec.LookPath("git"); err != nil {
		return Release{}, fmt.Errorf("%w: git: %v", ErrUnavailable, err)
	}
	out, err := git(repo, "rev-parse", "--verify", "--quiet", ref+"^{commit}")
	if err != nil {
		return Release{}, fmt.Errorf("%w: commit %s is not in %s's history: "+
			"a shallow clone? fetch the full history (git fetch --unshallow; actions/checkout fetch-depth: 0)", ErrUnavailable, ref, repo)
	}
	rel := Release{Commit: strings.TrimSpace(out)}
	if rel.Version, err = git(repo, "describe", "--tags", "--always", rel.Commit); err != nil {
		return rel, fmt.Errorf("git describe %s: %w", rel.Commit, err)
	}
	rel.Version = strings.TrimSpace(rel.Version)
	cache := filepath.Join(repo, "bin", "compat")
	rel.Dir = filepath.Join(cache, rel.Commit)
	if complete(rel.Dir) {
		return rel, nil
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return rel, err
	}
	os.RemoveAll(rel.Dir) // a release missing a binary (one removed by hand)
	// Built beside and renamed into place whole, so a run that is killed
	// or races another leaves no half-built release behind it.
	tmp, err := os.MkdirTemp(cache, ".build-")
	if err != nil {
		return rel, err
	}
	defer os.RemoveAll(tmp)
	if err := build(repo, rel, tmp); err != nil {
		return rel, err
	}
	if err := os.Rename(filepath.Join(tmp, "bin"), rel.Dir); err != nil && !complete(rel.Dir) {
		return rel, fmt.Errorf("caching the release: %w", err)
	}
	return rel, nil
}

// complete reports whether dir holds every command.
func complete(dir string) bool {
	for _, c := range Commands {
		if st, err := os.Stat(filepath.Join(dir, c)); err != nil || st.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// build extracts the commit's tree into tmp/src and builds its commands
// into tmp/bin as its Makefile would.
func build(repo string, rel Release, tmp string) error {
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	archive := exec.Command("git", "-C", repo, "archive", rel.Commit)
	extract := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	extract.Stdin = pipe
	var aerr, xerr strings.Builder
	archive.Stderr, extract.Stderr = &aerr, &xerr
	if err := extract.Start(); err != nil {
		return fmt.Errorf("tar: %w", err)
	}
	if err := archive.Run(); err != nil {
		extract.Wait()
		return fmt.Errorf("git archive %s: %w: %s", rel.Commit, err, aerr.String())
	}
	if err := extract.Wait(); err != nil {
		return fmt.Errorf("extracting %s: %w: %s", rel.Commit, err, xerr.String())
	}
	for _, cmd := range Commands {
		flags, err := exec.Command("sh", filepath.Join(src, "packaging", "buildflags.sh"), cmd).Output()
		if err != nil {
			return fmt.Errorf("%s's packaging/buildflags.sh %s: %w", rel.Commit, cmd, err)
		}
		args := []string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=" + rel.Version,
			"-o", filepath.Join(tmp, "bin", cmd)}
		args = append(append(args, strings.Fields(string(flags))...), "./cmd/"+cmd)
		b := exec.Command("go", args...)
		b.Dir = src
		b.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-buildvcs=false", "GOWORK=off")
		if out, err := b.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s of %s: %w\n%s", cmd, rel.Commit, err, out)
		}
	}
	return nil
}

func git(repo string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", repo}, args...)...).Output()
	if ee, ok := err.(*exec.ExitError); ok {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(ee.Stderr)))
	}
	return string(out), err
}
