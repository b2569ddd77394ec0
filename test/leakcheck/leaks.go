package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// leak is one thing the tests left behind.
type leak struct {
	kind, what, why string
}

func (l leak) String() string { return fmt.Sprintf("%s %s (%s)", l.kind, l.what, l.why) }

// testPrograms are the programs the tests run that would outlive them:
// the project's, the peers the tests start, and the workloads of their
// pods (a container's sleep ignores SIGTERM as PID 1).
var testPrograms = map[string]bool{
	"podvisor": true, "podvisor-shim": true, "podvisor-containerd": true, "podhub": true, "hog": true,
	"containerd": true, "containerd-shim": true, "containerd-shim-runc-v1": true, "containerd-shim-runc-v2": true,
	"runc": true, "mosquitto": true, "sleep": true,
}

// harnessCgroup matches the cgroup roots the test suites make, named
// after the pid of the test binary (podvisor-e2e-<pid>-<name>,
// podvisor-conformance-<pid>-<runtime>).
var harnessCgroup = regexp.MustCompile(`(?:^|/)podvisor-[a-z0-9]+-([0-9]+)-`)

// harnessPid is the test binary's pid in a harness cgroup path, or 0.
func harnessPid(path string) int {
	m := harnessCgroup.FindStringSubmatch(path)
	if m == nil {
		return 0
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// attribution tells the run's leftovers from what else happens on the
// machine.
type attribution struct {
	tempDirs []string
	pids     map[int]bool // processes seen carrying the run's token
	// shared: others run tests beside this run, so a path under a
	// temporary directory is the run's only when it is under one of dirs,
	// the first-level temporary directories the run's processes used.
	shared bool
	dirs   map[string]bool
}

// owns says whether path, under a temporary directory, is the run's.
func (a attribution) owns(path string) bool {
	if !underAny(path, a.tempDirs) {
		return false
	}
	return !a.shared || a.dirs[topTempDir(path, a.tempDirs)]
}

// topTempDir is the first-level entry of a temporary directory that path
// is in (/tmp/TestX123 for /tmp/TestX123/001/data), or "".
func topTempDir(path string, tempDirs []string) string {
	for _, d := range tempDirs {
		if rest, ok := strings.CutPrefix(path, strings.TrimSuffix(d, "/")+"/"); ok && rest != "" {
			first, _, _ := strings.Cut(rest, "/")
			return filepath.Join(d, first)
		}
	}
	return ""
}

// leaks lists what is in after but not in before and belongs to the tests.
// A harness cgroup named after a pid the run never had is another run's,
// one that goes on beside this one on a shared machine.
func leaks(before, after snapshot, a attribution) []leak {
	var out []leak
	byPid := map[int]process{}
	for _, p := range after.procs {
		byPid[p.pid] = p
	}
	for key, p := range after.procs {
		if _, old := before.procs[key]; old {
			continue
		}
		if why := a.testProcess(p, byPid); why != "" {
			out = append(out, leak{"process", fmt.Sprintf("%d %q", p.pid, strings.Join(p.cmdline, " ")), why})
		}
	}
	for key, m := range after.mounts {
		if _, old := before.mounts[key]; old {
			continue
		}
		inTemp := underAny(m.point, a.tempDirs)
		switch {
		case inTemp && !a.owns(m.point):
			// another run's
		case m.fstype == "nsfs":
			out = append(out, leak{"mount", m.point, "a bound namespace " + m.source})
		case under(m.point, "/run/podvisor") || under(m.point, "/run/netns"):
			out = append(out, leak{"mount", m.point, m.fstype})
		case inTemp:
			out = append(out, leak{"mount", m.point, m.fstype + " under a temporary directory"})
		}
	}
	for cg := range after.cgroups {
		if pid := harnessPid(cg); pid > 0 && !a.pids[pid] {
			continue
		}
		if !before.cgroups[cg] {
			out = append(out, leak{"cgroup", cg, "a podvisor cgroup"})
		}
	}
	for ns := range after.netns {
		if !before.netns[ns] {
			out = append(out, leak{"netns", ns, "a named network namespace"})
		}
	}
	return out
}

// testProcess says why a new process belongs to the tests, or "".
func (a attribution) testProcess(p process, byPid map[int]process) string {
	for q, seen := p, 0; seen < 64; seen++ { // the ancestors, up to a bound against cycles
		if q.tokened {
			return "started by the test command"
		}
		parent, ok := byPid[q.ppid]
		if !ok || q.ppid <= 1 {
			break
		}
		q = parent
	}
	for _, cg := range p.cgroups {
		if pid := harnessPid(cg); pid > 0 {
			if !a.pids[pid] {
				return "" // another run's pod
			}
			return "in this run's cgroup " + cg
		}
	}
	// By what it is, only once orphaned: a leaked process has lost the
	// test that started it, while another run's (or a user's) still has
	// its parent.
	if _, parent := byPid[p.ppid]; parent && p.ppid > 1 {
		return ""
	}
	switch {
	case !a.shared && (testPrograms[filepath.Base(p.exe)] || testPrograms[filepath.Base(p.cmdline[0])]):
		return "a program the tests run"
	case a.owns(p.exe) || a.owns(p.cmdline[0]):
		return "runs from a temporary directory"
	case p.root != "" && p.root != "/" && a.owns(p.root):
		return "a container rooted in a temporary directory"
	case a.owns(p.cwd):
		return "works in a temporary directory"
	}
	for _, cg := range p.cgroups {
		for _, part := range strings.Split(cg, "/") {
			if strings.HasPrefix(part, "podvisor") && !a.shared {
				return "in cgroup " + cg
			}
		}
	}
	return ""
}

// usedDirs adds to dirs the first-level temporary directories that p
// names in its arguments (also as --flag=path) or runs from, in or under.
func usedDirs(p process, tempDirs []string, dirs map[string]bool) {
	paths := []string{p.exe, p.cwd, p.root}
	for _, arg := range p.cmdline {
		_, v, _ := strings.Cut(arg, "=")
		paths = append(paths, arg, v)
	}
	for _, path := range paths {
		if d := topTempDir(path, tempDirs); d != "" {
			dirs[d] = true
		}
	}
}

func under(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, strings.TrimSuffix(dir, "/")+"/")
}

// underAny says whether path is strictly below one of dirs: /tmp itself is
// anyone's working directory.
func underAny(path string, dirs []string) bool {
	for _, d := range dirs {
		if path != "" && path != d && under(path, d) {
			return true
		}
	}
	return false
}
