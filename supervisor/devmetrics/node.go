package devmetrics

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/pressure"
)

// NodeUsage is the node's own usage, as the kubelet's root container.
type NodeUsage struct {
	CPUSeconds       float64 // every CPU's non-idle time since boot
	MemoryWorkingSet uint64  // in use less inactive file pages
	MemoryAvailable  uint64  // MemAvailable
	FsAvailable      uint64  // on the data directory's file system
}

// PSI is one resource's pressure stall information.
type PSI struct {
	Resource             string // cpu, memory or io
	SomeAvg10            float64
	SomeTotal, FullTotal time.Duration
	HasFull              bool
}

// NodeReader reads the node's usage and pressure.
type NodeReader interface {
	Usage() (NodeUsage, error)
	Pressure() ([]PSI, error)
}

// ProcNode reads the node from /proc, the v1 root memory cgroup when
// there is one (as the kubelet measures memory there), and statfs.
type ProcNode struct {
	// Proc is /proc (tests point it elsewhere).
	Proc string
	// MemoryCgroup is the v1 root memory cgroup ("" on cgroup v2).
	MemoryCgroup string
	// FsPath is a path on the node file system (the data directory).
	FsPath string
}

// userHZ is the unit of /proc/stat: USER_HZ is 100 on every Linux
// architecture.
const userHZ = 100

// Usage implements NodeReader.
func (n ProcNode) Usage() (NodeUsage, error) {
	var u NodeUsage
	cpu, err := n.cpuSeconds()
	if err != nil {
		return u, err
	}
	u.CPUSeconds = cpu
	info, err := readMeminfo(filepath.Join(n.proc(), "meminfo"))
	if err != nil {
		return u, err
	}
	u.MemoryAvailable = info["MemAvailable"]
	// cAdvisor's root container: usage (MemTotal - MemFree on v2, the
	// root memory cgroup's usage on v1) less inactive file pages.
	usage, inactive := sub(info["MemTotal"], info["MemFree"]), info["Inactive(file)"]
	if n.MemoryCgroup != "" {
		if cu, ci, err := pressure.RootUsage(n.MemoryCgroup); err == nil {
			usage, inactive = uint64(max(cu, 0)), uint64(max(ci, 0))
		}
	}
	u.MemoryWorkingSet = sub(usage, inactive)
	var st unix.Statfs_t
	if n.FsPath != "" && unix.Statfs(n.FsPath, &st) == nil {
		u.FsAvailable = st.Bavail * uint64(st.Bsize)
	}
	return u, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

func (n ProcNode) proc() string {
	if n.Proc == "" {
		return "/proc"
	}
	return n.Proc
}

// cpuSeconds is the "cpu" line of /proc/stat: user, nice, system, irq,
// softirq and steal (idle and iowait left out; guest time is in user).
func (n ProcNode) cpuSeconds() (float64, error) {
	f, err := os.Open(filepath.Join(n.proc(), "stat"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil {
		return 0, err
	}
	fields := strings.Fields(line)
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks uint64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // user nice system irq softirq steal
		v, err := strconv.ParseUint(fields[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %v", err)
		}
		ticks += v
	}
	return float64(ticks) / userHZ, nil
}

func readMeminfo(path string) (map[string]uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]uint64{}
	for line := range bytes.Lines(data) {
		name, rest, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		f := strings.Fields(string(rest))
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseUint(f[0], 10, 64)
		if err != nil {
			continue
		}
		if len(f) > 1 && f[1] == "kB" {
			v <<= 10
		}
		out[string(name)] = v
	}
	return out, nil
}

// Pressure implements NodeReader: /proc/pressure/{cpu,memory,io}; an
// empty list on a kernel without PSI.
func (n ProcNode) Pressure() ([]PSI, error) {
	var out []PSI
	for _, res := range []string{"cpu", "memory", "io"} {
		data, err := os.ReadFile(filepath.Join(n.proc(), "pressure", res))
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.EOPNOTSUPP) {
			continue // no PSI (CONFIG_PSI off, or psi=0)
		}
		if err != nil {
			return out, err
		}
		p, err := parsePSI(res, data)
		if err != nil {
			return out, err
		}
		out = append(out, p)
	}
	return out, nil
}

// parsePSI reads a pressure file: "some avg10=… avg60=… avg300=…
// total=µs" and, but for cpu before Linux 5.13, a "full" line.
func parsePSI(res string, data []byte) (PSI, error) {
	p := PSI{Resource: res}
	for line := range strings.Lines(string(data)) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		kv := map[string]string{}
		for _, x := range f[1:] {
			if k, v, ok := strings.Cut(x, "="); ok {
				kv[k] = v
			}
		}
		total, err := strconv.ParseUint(kv["total"], 10, 64)
		if err != nil {
			return p, fmt.Errorf("/proc/pressure/%s: bad total in %q", res, strings.TrimSpace(line))
		}
		switch f[0] {
		case "some":
			avg, err := strconv.ParseFloat(kv["avg10"], 64)
			if err != nil || avg < 0 || avg > 100 {
				return p, fmt.Errorf("/proc/pressure/%s: bad avg10 in %q", res, strings.TrimSpace(line))
			}
			p.SomeAvg10, p.SomeTotal = avg, time.Duration(total)*time.Microsecond
		case "full":
			p.FullTotal, p.HasFull = time.Duration(total)*time.Microsecond, true
		}
	}
	return p, nil
}
