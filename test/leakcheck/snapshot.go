package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/podvisor/podvisor/pod/mountinfo"
)

// snapshot is what of the host a test could leave behind.
type snapshot struct {
	procs   map[string]process // by pid and start time: a reused pid is another process
	mounts  map[string]mount   // by mount ID and point
	cgroups map[string]bool    // podvisor* cgroup directories, in every hierarchy
	netns   map[string]bool    // entries of /run/netns
}

type process struct {
	pid     int
	ppid    int
	cmdline []string
	exe     string   // the executable's path; empty when unreadable
	cwd     string   // working directory
	root    string   // root directory; not "/" in a container
	cgroups []string // one path per hierarchy
	tokened bool     // carries the run's token: descends from the test command
}

type mount struct {
	point, fstype, source string
}

// procHost reads the snapshot from /proc and /sys.
type procHost struct {
	tempDirs []string
	self     int
}

func (h procHost) snapshot(token string) snapshot {
	s := snapshot{procs: map[string]process{}, mounts: map[string]mount{}, cgroups: map[string]bool{}, netns: map[string]bool{}}
	h.readProcs(token, s.procs)
	mounts, _ := mountinfo.Read()
	var hierarchies []string
	for _, mi := range mounts {
		m := mount{point: mi.Point, fstype: mi.FSType, source: mi.Source}
		s.mounts[mi.ID+" "+m.point] = m
		if m.fstype == "cgroup" || m.fstype == "cgroup2" {
			hierarchies = append(hierarchies, m.point)
		}
	}
	for _, root := range hierarchies {
		findCgroups(root, 0, s.cgroups)
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		s.netns[filepath.Join("/run/netns", e.Name())] = true
	}
	return s
}

func (h procHost) readProcs(token string, into map[string]process) {
	marker := tokenVar + "=" + token
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == h.self {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... starttime(22nd): comm may hold ") ".
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 20 || fields[0] == "Z" {
			continue // gone, or a zombie its parent will reap
		}
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		if len(cmdline) == 0 {
			continue // a kernel thread
		}
		p := process{pid: pid, cmdline: strings.Split(strings.TrimSuffix(string(cmdline), "\x00"), "\x00")}
		p.ppid, _ = strconv.Atoi(fields[1])
		p.exe, _ = os.Readlink(filepath.Join(dir, "exe"))
		p.cwd, _ = os.Readlink(filepath.Join(dir, "cwd"))
		p.root, _ = os.Readlink(filepath.Join(dir, "root"))
		if cg, err := os.ReadFile(filepath.Join(dir, "cgroup")); err == nil {
			for _, line := range strings.Split(strings.TrimSpace(string(cg)), "\n") {
				if i := strings.LastIndexByte(line, ':'); i >= 0 {
					p.cgroups = append(p.cgroups, line[i+1:])
				}
			}
		}
		if env, err := os.ReadFile(filepath.Join(dir, "environ")); err == nil {
			for _, v := range bytes.Split(env, []byte{0}) {
				p.tokened = p.tokened || string(v) == marker
			}
		}
		into[strconv.Itoa(pid)+"@"+fields[19]] = p
	}
}

// findCgroups records the cgroup directories named podvisor* down to a
// few levels (a root of its own, or one under a slice), not what is
// inside them: a podvisor* cgroup left behind is reported once.
func findCgroups(dir string, depth int, into map[string]bool) {
	if depth > 3 {
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if strings.HasPrefix(e.Name(), "podvisor") {
			into[path] = true
			continue
		}
		findCgroups(path, depth+1, into)
	}
}
