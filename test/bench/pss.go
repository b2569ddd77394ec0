package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// smaps is one process's memory from /proc/PID/smaps_rollup, in MiB. PSS
// charges each shared page to its sharers in equal parts, so the PSS of a
// group of processes summed is what the group costs the machine: the
// shims' common text counts once, not once per shim.
type smaps struct {
	rss, pss, private float64
	anon              float64 // the anonymous part of pss: heap, stacks, runtime data
}

// pssOf reads one process's smaps_rollup; a process that is gone costs
// nothing.
func pssOf(pid int) smaps {
	f := procMiB(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	return smaps{rss: f["Rss:"], pss: f["Pss:"], private: f["Private_Clean:"] + f["Private_Dirty:"], anon: f["Pss_Anon:"]}
}

// procMiB reads a /proc file of "Key: N kB" lines into MiB by key; a file
// that cannot be read (a process gone) gives nothing.
func procMiB(path string) map[string]float64 {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	m := map[string]float64{}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		m[f[0]] = kb / 1024
	}
	return m
}

// group is the summed memory of the processes playing one part (the
// daemon, the shims, …).
type group struct {
	name  string
	count int
	smaps
}

func groupOf(name string, pids []int) group {
	g := group{name: name, count: len(pids)}
	for _, pid := range pids {
		m := pssOf(pid)
		g.rss += m.rss
		g.pss += m.pss
		g.private += m.private
		g.anon += m.anon
	}
	return g
}

// pidsWith lists the processes whose command line holds every word.
func pidsWith(words ...string) []int {
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || len(data) == 0 || !hasAll(data, words) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		pids = append(pids, pid)
	}
	return pids
}

// childrenOf lists the direct children of the given processes whose
// command name (comm) is one of names.
func childrenOf(parents []int, names ...string) []int {
	isParent := map[int]bool{}
	for _, p := range parents {
		isParent[p] = true
	}
	var pids []int
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, s := range stats {
		data, err := os.ReadFile(s)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …; comm may hold spaces and parentheses.
		text := string(data)
		open, end := strings.IndexByte(text, '('), strings.LastIndexByte(text, ')')
		if open < 0 || end < open {
			continue
		}
		rest := strings.Fields(text[end+1:])
		if len(rest) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(rest[1])
		if !isParent[ppid] {
			continue
		}
		comm := text[open+1 : end]
		for _, n := range names {
			if comm == n {
				pid, _ := strconv.Atoi(strings.TrimSpace(text[:open]))
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// printPSS prints each group's PSS beside its RSS and their total, and
// returns the total PSS.
func printPSS(title string, groups ...group) float64 {
	fmt.Printf("%-44s %5s %9s %9s %9s %9s\n", title, "procs", "PSS MiB", "PSS anon", "RSS MiB", "private")
	var total group
	for _, g := range groups {
		fmt.Printf("  %-42s %5d %9.2f %9.2f %9.2f %9.2f\n", g.name, g.count, g.pss, g.anon, g.rss, g.private)
		total.count += g.count
		total.pss += g.pss
		total.anon += g.anon
		total.rss += g.rss
		total.private += g.private
	}
	fmt.Printf("  %-42s %5d %9.2f %9.2f %9.2f %9.2f\n", "total", total.count, total.pss, total.anon, total.rss, total.private)
	return total.pss
}

// reclaimCold asks the kernel to page out everything of pid it can
// (process_madvise MADV_PAGEOUT: clean file pages such as the binary's
// text; anonymous memory stays without swap), as memory pressure would,
// and returns pid's memory after idle, once what it really uses has
// faulted back in. PSS counts every page mapped since the process
// started, most of them touched once at start-up; this is the part that
// stays resident on a device short of memory.
func reclaimCold(pid int, idle time.Duration) (smaps, error) {
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return smaps{}, err
	}
	defer unix.Close(pidfd)
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return smaps{}, err
	}
	// struct iovec, with addresses of another process: not Go pointers.
	type iovec struct{ base, len uintptr }
	var ranges []iovec
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || (len(f) >= 6 && strings.HasPrefix(f[5], "[")) { // [vdso], [stack]…
			continue
		}
		start, end, _ := strings.Cut(f[0], "-")
		a, err1 := strconv.ParseUint(start, 16, 64)
		b, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || b <= a {
			continue
		}
		ranges = append(ranges, iovec{uintptr(a), uintptr(b - a)})
	}
	for len(ranges) > 0 {
		n := min(len(ranges), 512) // below UIO_MAXIOV
		_, _, errno := unix.Syscall6(unix.SYS_PROCESS_MADVISE, uintptr(pidfd), uintptr(unsafe.Pointer(&ranges[0])), uintptr(n), unix.MADV_PAGEOUT, 0, 0)
		if errno != 0 {
			return smaps{}, fmt.Errorf("process_madvise: %w", errno)
		}
		ranges = ranges[n:]
	}
	time.Sleep(idle)
	return pssOf(pid), nil
}
