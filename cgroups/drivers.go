package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/pod/mountinfo"
	"github.com/podvisor/podvisor/pod/resources"
)

// The drivers write the cgroup files directly: podvisor needs about a
// dozen of them, and the libraries that wrap them (containerd/cgroups,
// opencontainers/cgroups) link protobuf, eBPF and D-Bus code that cost
// 4.7 MiB of binary and 2.6 MiB of resident memory in measurement.

func write(dir, file, value string) error {
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value), 0); err != nil {
		return fmt.Errorf("writing %s to %s: %w", value, filepath.Join(dir, file), err)
	}
	return nil
}

func readUint(dir, file string) (v uint64, err error) {
	err = readSmall(filepath.Join(dir, file), func(data []byte) error {
		v, err = strconv.ParseUint(string(bytes.TrimSpace(data)), 10, 64)
		return err
	})
	return v, err
}

// procsBelow lists the processes of a cgroup directory and its children.
func procsBelow(dir string) ([]int, error) {
	var out []int
	err := filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err != nil || !e.IsDir() {
			return err
		}
		data, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return err
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
		return nil
	})
	return out, err
}

// freezeKill kills every process of a cgroup directory tree while it is
// frozen, so none can fork away; then thaws it so the kills land.
func freezeKill(dir string, freeze, thaw func() error) error {
	frozen := freeze() == nil
	for i := 0; i < 100; i++ {
		procs, err := procsBelow(dir)
		if err != nil || len(procs) == 0 {
			break
		}
		for _, p := range procs {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if frozen {
			thaw()
			frozen = false
		}
		time.Sleep(time.Millisecond)
	}
	if frozen {
		return thaw()
	}
	return nil
}

// unified drives the cgroup v2 hierarchy.
type unified struct{ mount string }

var v2Controllers = []string{"cpu", "memory", "pids"}

func (d *unified) Version() int { return 2 }

func (d *unified) dir(path string) string { return filepath.Join(d.mount, clean(path)) }

// Ensure creates the cgroup with its parents, enabling the cpu, memory and
// pids controllers down the way (a controller reaches a cgroup only when
// every ancestor delegates it), and writes the limits.
func (d *unified) Ensure(path string, l resources.Limits) error {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	dir := d.mount
	for _, part := range parts {
		for _, c := range v2Controllers {
			if err := write(dir, "cgroup.subtree_control", "+"+c); err != nil && !alreadyEnabled(dir, c) {
				return fmt.Errorf("cgroup %s: enabling %s: %w", path, c, err)
			}
		}
		dir = filepath.Join(dir, part)
		if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cgroup %s: %w", path, err)
		}
	}
	weight, max, mem, low, pids := "100", "max 100000", "max", "0", "max"
	if l.CPUShares > 0 {
		weight = strconv.FormatUint(resources.CPUWeight(l.CPUShares), 10)
	}
	if l.CPUQuota > 0 {
		max = fmt.Sprintf("%d %d", l.CPUQuota, resources.QuotaPeriod)
	}
	if l.MemoryMax > 0 {
		mem = strconv.FormatInt(l.MemoryMax, 10)
	}
	if l.MemoryLow > 0 {
		low = strconv.FormatInt(l.MemoryLow, 10)
	}
	if l.PidsMax > 0 {
		pids = strconv.FormatInt(l.PidsMax, 10)
	}
	for file, v := range map[string]string{"cpu.weight": weight, "cpu.max": max, "memory.max": mem, "memory.low": low, "pids.max": pids} {
		if err := write(dir, file, v); err != nil {
			return err
		}
	}
	return nil
}

func alreadyEnabled(dir, controller string) bool {
	data, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	return err == nil && strings.Contains(" "+string(data)+" ", " "+controller+" ")
}

func (d *unified) Placement(path string) Placement { return Placement{Dir: d.dir(path)} }

func (d *unified) Kill(path string) error {
	dir := d.dir(path)
	if err := write(dir, "cgroup.kill", "1"); err == nil {
		return nil
	}
	// Kernels before 5.14 have no cgroup.kill.
	return freezeKill(dir, func() error { return write(dir, "cgroup.freeze", "1") },
		func() error { return write(dir, "cgroup.freeze", "0") })
}

func (d *unified) Remove(path string) error { return removeTree(d.dir(path)) }

func (d *unified) Stats(path string) (Stats, error) {
	dir := d.dir(path)
	usage, err := readUint(dir, "memory.current")
	if err != nil {
		return Stats{}, err
	}
	inactive, _ := counter(filepath.Join(dir, "memory.stat"), "inactive_file")
	cpu, _ := counter(filepath.Join(dir, "cpu.stat"), "usage_usec")
	pids, _ := readUint(dir, "pids.current")
	return Stats{CPUUsageNanos: cpu * 1000, MemoryWorkingSet: workingSet(usage, inactive), Pids: pids}, nil
}

func (d *unified) Procs(path string) ([]int, error) { return procsBelow(d.dir(path)) }

func (d *unified) OOMKills(path string) (uint64, error) {
	return counter(filepath.Join(d.dir(path), "memory.events"), "oom_kill")
}

// workingSet is usage less inactive file pages, the kubelet's measure.
func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile > usage {
		return 0
	}
	return usage - inactiveFile
}

// legacy drives the cgroup v1 hierarchies (also the v1 side of a hybrid
// host).
type legacy struct {
	mounts map[string]string // controller -> mount point
}

// v1Controllers are the hierarchies podvisor places processes in.
var v1Controllers = []string{"cpu", "cpuacct", "memory", "pids", "freezer"}

func newLegacy() (*legacy, error) {
	mounts, err := v1Mounts()
	if err != nil {
		return nil, err
	}
	for _, c := range []string{"cpu", "memory", "pids"} {
		if mounts[c] == "" {
			return nil, fmt.Errorf("cgroup v1: no %s controller mounted", c)
		}
	}
	return &legacy{mounts: mounts}, nil
}

// v1Mounts reads where each v1 controller is mounted.
func v1Mounts() (map[string]string, error) {
	mounts, err := mountinfo.Read()
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, m := range mounts {
		if m.FSType != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(m.SuperOptions, ",") {
			out[opt] = m.Point
		}
	}
	return out, nil
}

func (d *legacy) Version() int { return 1 }

func (d *legacy) dir(controller, path string) string {
	return filepath.Join(d.mounts[controller], clean(path))
}

func (d *legacy) Ensure(path string, l resources.Limits) error {
	for _, c := range v1Controllers {
		if d.mounts[c] == "" {
			continue
		}
		if err := os.MkdirAll(d.dir(c, path), 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", path, err)
		}
	}
	shares, quota, mem, pids := "1024", "-1", "-1", "max"
	if l.CPUShares > 0 {
		shares = strconv.FormatUint(l.CPUShares, 10)
	}
	if l.CPUQuota > 0 {
		quota = strconv.FormatInt(l.CPUQuota, 10)
	}
	if l.MemoryMax > 0 {
		mem = strconv.FormatInt(l.MemoryMax, 10)
	}
	if l.PidsMax > 0 {
		pids = strconv.FormatInt(l.PidsMax, 10)
	}
	cpu := d.dir("cpu", path)
	for _, w := range []struct{ dir, file, v string }{
		{cpu, "cpu.shares", shares},
		{cpu, "cpu.cfs_period_us", strconv.Itoa(resources.QuotaPeriod)},
		{cpu, "cpu.cfs_quota_us", quota},
		{d.dir("memory", path), "memory.limit_in_bytes", mem},
		{d.dir("pids", path), "pids.max", pids},
	} {
		if err := write(w.dir, w.file, w.v); err != nil {
			return err
		}
	}
	return nil
}

func (d *legacy) Placement(path string) Placement {
	var p Placement
	for _, c := range v1Controllers {
		if d.mounts[c] != "" {
			p.Procs = append(p.Procs, filepath.Join(d.dir(c, path), "cgroup.procs"))
		}
	}
	return p
}

// Kill freezes the cgroup so nothing can fork, SIGKILLs every process,
// and thaws it so they die; v1 has no cgroup.kill.
func (d *legacy) Kill(path string) error {
	freezer := d.dir("freezer", path)
	if d.mounts["freezer"] == "" {
		return freezeKill(d.dir("memory", path), func() error { return errors.New("no freezer") }, func() error { return nil })
	}
	return freezeKill(d.dir("memory", path),
		func() error { return write(freezer, "freezer.state", "FROZEN") },
		func() error { return write(freezer, "freezer.state", "THAWED") })
}

func (d *legacy) Remove(path string) error {
	var first error
	for _, c := range v1Controllers {
		if d.mounts[c] == "" {
			continue
		}
		if err := removeTree(d.dir(c, path)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (d *legacy) Stats(path string) (Stats, error) {
	mem := d.dir("memory", path)
	usage, err := readUint(mem, "memory.usage_in_bytes")
	if err != nil {
		return Stats{}, err
	}
	inactive, _ := counter(filepath.Join(mem, "memory.stat"), "total_inactive_file")
	cpu, _ := readUint(d.dir("cpuacct", path), "cpuacct.usage")
	pids, _ := readUint(d.dir("pids", path), "pids.current")
	return Stats{CPUUsageNanos: cpu, MemoryWorkingSet: workingSet(usage, inactive), Pids: pids}, nil
}

func (d *legacy) Procs(path string) ([]int, error) { return procsBelow(d.dir("memory", path)) }

func (d *legacy) OOMKills(path string) (uint64, error) {
	return counter(filepath.Join(d.dir("memory", path), "memory.oom_control"), "oom_kill")
}

// V1MemoryMount is where the cgroup v1 memory controller is mounted, or ""
// (cgroup v2, or no memory controller).
func V1MemoryMount() string {
	mounts, err := v1Mounts()
	if err != nil {
		return ""
	}
	return mounts["memory"]
}
