package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The program's own text and read-only data are found, its writable data
// is not, and advising them away drops them from the process's RSS.
func TestReleaseStartupTextPagesOutTheProgram(t *testing.T) {
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	st := exe.Sys().(*syscall.Stat_t)
	ranges, err := readOnlyMappingsOf(devOf(st), st.Ino)
	if err != nil {
		t.Fatal(err)
	}
	var text bool
	maps, _ := os.ReadFile("/proc/self/maps")
	for _, line := range strings.Split(string(maps), "\n") {
		f := strings.Fields(line)
		if len(f) < 6 || f[4] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		lo, _, _ := strings.Cut(f[0], "-")
		start, _ := strconv.ParseUint(lo, 16, 64)
		found := false
		for _, r := range ranges {
			found = found || r.start == uintptr(start)
		}
		if writable := strings.Contains(f[1], "w"); writable == found {
			t.Errorf("mapping %q: listed %v", line, found)
		}
		text = text || (found && strings.Contains(f[1], "x"))
	}
	if !text {
		t.Fatalf("the program's text is not among %d mappings:\n%s", len(ranges), maps)
	}

	before := rssFileKiB(t)
	n, err := releaseStartupText()
	if errors.Is(err, unix.EINVAL) || errors.Is(err, errMemoryBacked) {
		t.Skipf("nothing to page out here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	if n == 0 || after >= before {
		t.Fatalf("released %d bytes: file-backed RSS %d KiB before, %d KiB after", n, before, after)
	}
	t.Logf("released %d bytes: file-backed RSS %d KiB before, %d KiB after", n, before, after)
}

func rssFileKiB(t *testing.T) int {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			kib, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return kib
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}
