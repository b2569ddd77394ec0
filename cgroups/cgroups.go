// Package cgroups places pods and containers in cgroups and enforces their
// limits: cgroup v2 (unified) as the primary target, v1 (legacy or hybrid)
// as legacy, detected at start.
//
// The drivers write cgroup files directly (see drivers.go for why).
//
// The Layout (layout.go) names the cgroups as the kubelet names kubepods,
// as plain directories or as systemd slices and scopes.
package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/pod/resources"
)

// Stats is one cgroup's usage.
type Stats struct {
	CPUUsageNanos    uint64
	MemoryWorkingSet uint64 // usage minus inactive file cache, as the kubelet counts it
	Pids             uint64 // tasks (threads) counted by the pids controller
}

// Driver is one cgroup hierarchy version.
type Driver interface {
	// Version is 1 or 2.
	Version() int
	// Ensure creates the cgroup (and its parents) and applies limits.
	Ensure(path string, l resources.Limits) error
	// Placement tells a shim how to put its container into the cgroup
	// before the container runs.
	Placement(path string) Placement
	// Kill SIGKILLs every process in the cgroup, descendants included.
	Kill(path string) error
	// Remove deletes an empty cgroup and its empty child cgroups.
	Remove(path string) error
	// Stats reads the cgroup's usage.
	Stats(path string) (Stats, error)
	// Procs lists the processes in the cgroup and below.
	Procs(path string) ([]int, error)
	// OOMKills counts the kernel's OOM kills in the cgroup so far.
	OOMKills(path string) (uint64, error)
}

// Placement is what a shim needs to start a process inside a cgroup.
type Placement struct {
	// Dir is the v2 cgroup directory, for clone3(CLONE_INTO_CGROUP).
	Dir string `json:"dir,omitempty"`
	// Procs are the v1 cgroup.procs files, one per hierarchy, that the
	// shim joins before forking and leaves afterwards.
	Procs []string `json:"procs,omitempty"`
}

// Detect picks the driver for the hierarchy mounted at mount (normally
// /sys/fs/cgroup): unified when it is a cgroup2 file system, else the v1
// controllers (a hybrid host's /sys/fs/cgroup/unified has no controllers).
func Detect(mount string) (Driver, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(mount, &st); err != nil {
		return nil, fmt.Errorf("cgroup mount %s: %w", mount, err)
	}
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		return &unified{mount: mount}, nil
	}
	return newLegacy()
}

// removeTree removes a cgroup directory after its child cgroups (a cgroup
// directory holds only kernel files besides its children, and rmdir takes
// it with them once it is empty of processes).
func removeTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeTree(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

func clean(path string) string { return "/" + strings.Trim(path, "/") }

// counter reads "name value" from a flat-keyed cgroup file.
func counter(file, name string) (v uint64, err error) {
	prefix := name + " "
	err = readSmall(file, func(data []byte) error {
		for line := range bytes.Lines(data) {
			if rest, ok := bytes.CutPrefix(line, []byte(prefix)); ok {
				v, err = strconv.ParseUint(string(bytes.TrimSpace(rest)), 10, 64)
				return err
			}
		}
		return nil
	})
	return v, err
}

// smallFiles are the buffers kernel files are read into: a metrics
// scrape reads a few files of every pod's and container's cgroups, and
// os.ReadFile would allocate (and grow) a buffer for each.
var smallFiles = sync.Pool{New: func() any { b := make([]byte, 16<<10); return &b }}

// readSmall reads a kernel file of at most 16 KiB (a cgroup's stat
// files) into a pooled buffer and hands it to f, which must not keep it.
func readSmall(file string, f func([]byte) error) error {
	fd, err := os.Open(file)
	if err != nil {
		return err
	}
	defer fd.Close()
	bp := smallFiles.Get().(*[]byte)
	defer smallFiles.Put(bp)
	buf, n := *bp, 0
	for n < len(buf) {
		m, err := fd.Read(buf[n:])
		n += m
		if err == io.EOF || m == 0 {
			break
		}
		if err != nil {
			return err
		}
	}
	if n == len(buf) {
		return fmt.Errorf("%s: longer than %d bytes", file, len(buf))
	}
	return f(buf[:n])
}
