package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"syscall"
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
	exe, err := os.Stat("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	var fs unix.Statfs_t
	if err := unix.Statfs("/proc/self/exe", &fs); err != nil {
		return 0, err
	}
	if fs.Type == unix.TMPFS_MAGIC || fs.Type == unix.RAMFS_MAGIC {
		// Memory-backed: its pages are not a copy of anything on disk,
		// and paging them out would write them to swap.
		return 0, errMemoryBacked
	}
	st := exe.Sys().(*syscall.Stat_t)
	ranges, err := readOnlyMappingsOf(devOf(st), st.Ino)
	if err != nil {
		return 0, err
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

// devOf is the file's device as /proc/PID/maps writes it.
func devOf(st *syscall.Stat_t) string {
	return fmt.Sprintf("%02x:%02x", unix.Major(st.Dev), unix.Minor(st.Dev))
}

type addrRange struct{ start, end uintptr }

// readOnlyMappingsOf lists this process's mappings of the file dev, ino
// (dev as /proc/PID/maps writes it) that are not writable: the program's text and read-only data, not
// its data segment (which may be written, so not clean).
func readOnlyMappingsOf(dev string, ino uint64) ([]addrRange, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ranges []addrRange
	s := bufio.NewScanner(f)
	for s.Scan() {
		// 00400000-00c2e000 r-xp 00000000 fd:01 1234 /usr/bin/podvisor
		fields := strings.Fields(s.Text())
		if len(fields) < 6 || strings.Contains(fields[1], "w") {
			continue
		}
		if n, err := strconv.ParseUint(fields[4], 10, 64); err != nil || n != ino || fields[3] != dev {
			continue
		}
		lo, hi, _ := strings.Cut(fields[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		ranges = append(ranges, addrRange{uintptr(start), uintptr(end)})
	}
	return ranges, s.Err()
}
