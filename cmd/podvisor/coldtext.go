package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// startupTextSettle is how long after the daemon starts supervising its
// start-up code is considered done with: the package inits, the state
// restore and the first reconcile of the manifests.
const startupTextSettle = 2 * time.Second

// releaseAfterStartup releases the start-up code startupTextSettle after
// supervising closes, unless ctx ends first.
func releaseAfterStartup(ctx context.Context, supervising <-chan struct{}, log *slog.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-supervising:
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(startupTextSettle):
	}
	n, err := releaseStartupText()
	if err != nil {
		// An old kernel (MADV_PAGEOUT is Linux 5.4), no /proc, or a
		// program on tmpfs: the pages stay mapped, as they did before.
		log.Debug("start-up code not released", "err", err)
		return
	}
	log.Debug("start-up code released", "bytes", n)
}

// errMemoryBacked: the program runs from tmpfs or ramfs.
var errMemoryBacked = errors.New("the program is on a memory-backed file system")

// releaseStartupText pages out the daemon's own program text and read-only
// data once start-up is done. Start-up touches code across the whole
// binary (every package's init, SQLite's, the restore), and the kernel
// maps the neighbours of every page touched, so about 14 MiB of the
// binary stays mapped while the daemon at rest uses about 1 MiB of it
// (docs/footprint.md). These pages are clean and file-backed: dropping
// them costs no write, and what is still used comes back on its next use.
// MADV_RANDOM first, so that a page faulted back in brings no read-around
// of its neighbours with it. It returns the bytes advised.
func releaseStartupText() (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs("/proc/self/exe", &fs); err != nil {
		return 0, err
	}
	// uint32: f_type is an int32 on 32-bit ARM and 386, and RAMFS_MAGIC
	// does not fit one.
	if magic := uint32(fs.Type); magic == unix.TMPFS_MAGIC || magic == unix.RAMFS_MAGIC {
		// Memory-backed: its pages are not a copy of anything on disk,
		// and paging them out would write them to swap.
		return 0, errMemoryBacked
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	ranges := programMappings(maps, reflect.ValueOf(releaseStartupText).Pointer())
	if len(ranges) == 0 {
		return 0, errors.New("the program's mappings are not in /proc/self/maps")
	}
	var total int64
	for _, r := range ranges {
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_RANDOM); errno != 0 {
			return total, fmt.Errorf("madvise(MADV_RANDOM) %#x-%#x: %w", r.start, r.end, errno)
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, r.start, r.end-r.start, unix.MADV_PAGEOUT); errno != 0 {
			return total, fmt.Errorf("madvise(MADV_PAGEOUT) %#x-%#x: %w", r.start, r.end, errno)
		}
		total += int64(r.end - r.start)
	}
	return total, nil
}

type addrRange struct{ start, end uintptr }

// programMappings lists, from /proc/PID/maps content, the mappings that
// are not writable of the file that holds the code at codeAddr: the
// program's text and read-only data, not its data segment (which may be
// written, so not clean). The file is named by the device and inode the
// mapping lines give, not by stat(/proc/self/exe), which on overlayfs
// names the overlay's inode instead of the one mapped.
func programMappings(maps []byte, codeAddr uintptr) []addrRange {
	type mapping struct {
		addrRange
		writable bool
		file     string // "dev inode"
	}
	var all []mapping
	var program string
	for _, line := range strings.Split(string(maps), "\n") {
		// 00400000-00c2e000 r-xp 00000000 fd:01 1234 /usr/bin/podvisor
		f := strings.Fields(line)
		if len(f) < 5 || f[4] == "0" {
			continue // anonymous
		}
		lo, hi, _ := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		m := mapping{addrRange{uintptr(start), uintptr(end)}, strings.Contains(f[1], "w"), f[3] + " " + f[4]}
		if m.start <= codeAddr && codeAddr < m.end {
			program = m.file
		}
		all = append(all, m)
	}
	var ranges []addrRange
	for _, m := range all {
		if program != "" && m.file == program && !m.writable {
			ranges = append(ranges, m.addrRange)
		}
	}
	return ranges
}
