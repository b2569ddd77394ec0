package main

import (
	"errors"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/prereq"
	"github.com/podvisor/podvisor/test/procstat"
)

// The mappings of the file holding the code are chosen by the device and
// inode the maps lines give: its text and read-only data, not its data,
// nor another file's, nor anonymous memory.
func TestProgramMappings(t *testing.T) {
	maps := `00400000-00d01000 r-xp 00000000 00:2a 4242 /usr/bin/podvisor
00d01000-015bb000 r--p 00901000 00:2a 4242 /usr/bin/podvisor
015bb000-01641000 rw-p 011bb000 00:2a 4242 /usr/bin/podvisor
01641000-0368d000 rw-p 00000000 00:00 0
7f0000000000-7f0000001000 r--p 00000000 08:01 4242 /usr/lib/other (same inode, other device)
7f0000001000-7f0000002000 r-xp 00000000 00:2a 777 /usr/bin/other-file
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0 [stack]
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0 [vdso]
`
	got := programMappings([]byte(maps), 0x401234)
	want := []addrRange{{0x400000, 0xd01000}, {0xd01000, 0x15bb000}}
	if !slices.Equal(got, want) {
		t.Errorf("got %#v, want %#v", got, want)
	}
	if got := programMappings([]byte(maps), 0x1000); got != nil {
		t.Errorf("code outside every mapping: got %#v, want none", got)
	}
}

// Advising the program's own mappings away drops them from the process's
// file-backed RSS.
func TestReleaseStartupTextPagesOutTheProgram(t *testing.T) {
	before := rssFileKiB(t)
	n, err := releaseStartupText()
	if errors.Is(err, unix.EINVAL) || errors.Is(err, errMemoryBacked) {
		prereq.Missing(t, "a file-backed binary and MADV_PAGEOUT: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKiB(t)
	if n == 0 || after >= before/2 {
		t.Fatalf("released %d bytes: file-backed RSS %d KiB before, %d KiB after", n, before, after)
	}
	t.Logf("released %d bytes: file-backed RSS %d KiB before, %d KiB after", n, before, after)
}

// rssFileKiB is this process's file-backed RSS.
func rssFileKiB(t *testing.T) int {
	t.Helper()
	kib, err := procstat.KiB("self", "RssFile")
	if err != nil {
		t.Fatal(err)
	}
	return kib
}
