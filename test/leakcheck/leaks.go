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

// leaks lists what is in after but not in before and belongs to the tests.
// ours holds the pids of the processes seen carrying the run's token while
// it ran: a harness cgroup named after another pid is another run's, one
// that goes on beside this one on a shared machine.
func leaks(before, after snapshot, ours map[int]bool, tempDirs []string) []leak {
	var out []leak
	byPid := map[int]process{}
	for _, p := range after.procs {
		byPid[p.pid] = p
	}
	for key, p := range after.procs {
		if _, old := before.procs[key]; old {
			continue
		}
		if why := testProcess(p, byPid, ours, tempDirs); why != "" {
			out = append(out, leak{"process", fmt.Sprintf("%d %q", p.pid, strings.Join(p.cmdline, " ")), why})
		}
	}
	for key, m := range after.mounts {
		if _, old := before.mounts[key]; old {
			continue
		}
		switch {
		case m.fstype == "nsfs":
			out = append(out, leak{"mount", m.point, "a bound namespace " + m.source})
		case under(m.point, "/run/podvisor") || under(m.point, "/run/netns"):
			out = append(out, leak{"mount", m.point, m.fstype})
		case underAny(m.point, tempDirs):
			out = append(out, leak{"mount", m.point, m.fstype + " under a temporary directory"})
		}
	}
	for cg := range after.cgroups {
		if pid := harnessPid(cg); pid > 0 && !ours[pid] {
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
func testProcess(p process, byPid map[int]process, ours map[int]bool, tempDirs []string) string {
	for a, seen := p, 0; seen < 64; seen++ { // the ancestors, up to a bound against cycles
		if a.tokened {
			return "started by the test command"
		}
		parent, ok := byPid[a.ppid]
		if !ok || a.ppid <= 1 {
			break
		}
		a = parent
	}
	for _, cg := range p.cgroups {
		if pid := harnessPid(cg); pid > 0 {
			if !ours[pid] {
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
	case testPrograms[filepath.Base(p.exe)] || testPrograms[filepath.Base(p.cmdline[0])]:
		return "a program the tests run"
	case underAny(p.exe, tempDirs) || underAny(p.cmdline[0], tempDirs):
		return "runs from a temporary directory"
	case p.root != "" && p.root != "/" && underAny(p.root, tempDirs):
		return "a container rooted in a temporary directory"
	case underAny(p.cwd, tempDirs):
		return "works in a temporary directory"
	}
	for _, cg := range p.cgroups {
		for _, part := range strings.Split(cg, "/") {
			if strings.HasPrefix(part, "podvisor") {
				return "in cgroup " + cg
			}
		}
	}
	return ""
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
