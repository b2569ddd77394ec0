package cgroups

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/podvisor/podvisor/supervisor/resources"
)

// unified drives the cgroup v2 hierarchy.
type unified struct{ mount string }

func (d *unified) Version() int { return 2 }

func (d *unified) Ensure(path string, l resources.Limits) error {
	res := &cgroup2.Resources{CPU: &cgroup2.CPU{}, Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{}}
	if l.CPUShares > 0 {
		w := resources.CPUWeight(l.CPUShares)
		res.CPU.Weight = &w
	}
	if l.CPUQuota > 0 {
		q, p := l.CPUQuota, uint64(resources.QuotaPeriod)
		res.CPU.Max = cgroup2.NewCPUMax(&q, &p)
	}
	if l.MemoryMax > 0 {
		res.Memory.Max = &l.MemoryMax
	}
	if l.MemoryLow > 0 {
		res.Memory.Low = &l.MemoryLow
	}
	if l.PidsMax > 0 {
		res.Pids.Max = l.PidsMax
	}
	m, err := cgroup2.NewManager(d.mount, clean(path), res)
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	// Enable the controllers for children too: pods and QoS tiers hold
	// container cgroups below them.
	if err := m.ToggleControllers([]string{"cpu", "memory", "pids"}, cgroup2.Enable); err != nil {
		return fmt.Errorf("cgroup %s: enabling controllers: %w", path, err)
	}
	return nil
}

func (d *unified) Placement(path string) Placement {
	return Placement{Dir: filepath.Join(d.mount, clean(path))}
}

func (d *unified) load(path string) (*cgroup2.Manager, error) {
	return cgroup2.Load(clean(path), cgroup2.WithMountpoint(d.mount))
}

func (d *unified) Kill(path string) error {
	m, err := d.load(path)
	if err != nil {
		return err
	}
	return m.Kill()
}

func (d *unified) Remove(path string) error {
	return removeTree(filepath.Join(d.mount, clean(path)))
}

func (d *unified) Stats(path string) (Stats, error) {
	m, err := d.load(path)
	if err != nil {
		return Stats{}, err
	}
	st, err := m.Stat()
	if err != nil {
		return Stats{}, err
	}
	var out Stats
	if c := st.GetCPU(); c != nil {
		out.CPUUsageNanos = c.UsageUsec * 1000
	}
	if mem := st.GetMemory(); mem != nil {
		out.MemoryWorkingSet = workingSet(mem.Usage, mem.InactiveFile)
	}
	if p := st.GetPids(); p != nil {
		out.Pids = p.Current
	}
	return out, nil
}

func (d *unified) Procs(path string) ([]int, error) {
	m, err := d.load(path)
	if err != nil {
		return nil, err
	}
	pids, err := m.Procs(true)
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, err
}

func (d *unified) OOMKills(path string) (uint64, error) {
	return counter(filepath.Join(d.mount, clean(path), "memory.events"), "oom_kill")
}

// workingSet is usage less inactive file pages, the kubelet's measure.
func workingSet(usage, inactiveFile uint64) uint64 {
	if inactiveFile > usage {
		return 0
	}
	return usage - inactiveFile
}

// legacy drives the cgroup v1 hierarchies (also the v1 side of a hybrid host).
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
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || sep+3 >= len(fields) || fields[sep+1] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(fields[sep+3], ",") {
			out[opt] = fields[4]
		}
	}
	return out, s.Err()
}

func (d *legacy) Version() int { return 1 }

func (d *legacy) hierarchy() ([]cgroup1.Subsystem, error) {
	var subs []cgroup1.Subsystem
	for _, c := range v1Controllers {
		root := d.mounts[c]
		if root == "" {
			continue
		}
		// Each constructor takes the directory that holds the
		// controller's mount, as cgroup1.Default does.
		parent := filepath.Dir(root)
		switch c {
		case "cpu":
			subs = append(subs, cgroup1.NewCpu(parent))
		case "cpuacct":
			subs = append(subs, cgroup1.NewCpuacct(parent))
		case "memory":
			subs = append(subs, cgroup1.NewMemory(parent))
		case "pids":
			subs = append(subs, cgroup1.NewPids(parent))
		case "freezer":
			subs = append(subs, cgroup1.NewFreezer(parent))
		}
	}
	return subs, nil
}

func (d *legacy) Ensure(path string, l resources.Limits) error {
	res := &specs.LinuxResources{CPU: &specs.LinuxCPU{}, Memory: &specs.LinuxMemory{}}
	if l.CPUShares > 0 {
		res.CPU.Shares = &l.CPUShares
	}
	if l.CPUQuota > 0 {
		q, p := l.CPUQuota, uint64(resources.QuotaPeriod)
		res.CPU.Quota, res.CPU.Period = &q, &p
	}
	if l.MemoryMax > 0 {
		res.Memory.Limit = &l.MemoryMax
	}
	if l.PidsMax > 0 {
		res.Pids = &specs.LinuxPids{Limit: &l.PidsMax}
	}
	_, err := cgroup1.New(cgroup1.StaticPath(clean(path)), res, cgroup1.WithHierarchy(d.hierarchy))
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", path, err)
	}
	return nil
}

func (d *legacy) Placement(path string) Placement {
	var p Placement
	for _, c := range v1Controllers {
		if root := d.mounts[c]; root != "" {
			p.Procs = append(p.Procs, filepath.Join(root, clean(path), "cgroup.procs"))
		}
	}
	return p
}

func (d *legacy) load(path string) (cgroup1.Cgroup, error) {
	return cgroup1.Load(cgroup1.StaticPath(clean(path)), cgroup1.WithHierarchy(d.hierarchy))
}

// Kill freezes the cgroup so nothing can fork, SIGKILLs every process,
// and thaws it so they die; v1 has no cgroup.kill.
func (d *legacy) Kill(path string) error {
	cg, err := d.load(path)
	if err != nil {
		return err
	}
	frozen := cg.Freeze() == nil
	for i := 0; i < 50; i++ {
		procs, err := d.Procs(path)
		if err != nil || len(procs) == 0 {
			break
		}
		for _, p := range procs {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if frozen {
			cg.Thaw()
			frozen = false
		}
		time.Sleep(time.Millisecond)
	}
	if frozen {
		cg.Thaw()
	}
	return nil
}

func (d *legacy) Remove(path string) error {
	var first error
	for _, c := range v1Controllers {
		if root := d.mounts[c]; root != "" {
			if err := removeTree(filepath.Join(root, clean(path))); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

func (d *legacy) Stats(path string) (Stats, error) {
	cg, err := d.load(path)
	if err != nil {
		return Stats{}, err
	}
	st, err := cg.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return Stats{}, err
	}
	var out Stats
	if c := st.GetCPU(); c != nil && c.Usage != nil {
		out.CPUUsageNanos = c.Usage.Total
	}
	if m := st.GetMemory(); m != nil && m.Usage != nil {
		out.MemoryWorkingSet = workingSet(m.Usage.Usage, m.TotalInactiveFile)
	}
	if p := st.GetPids(); p != nil {
		out.Pids = p.Current
	}
	return out, nil
}

func (d *legacy) Procs(path string) ([]int, error) {
	cg, err := d.load(path)
	if err != nil {
		return nil, err
	}
	procs, err := cg.Processes(cgroup1.Memory, true)
	out := make([]int, len(procs))
	for i, p := range procs {
		out[i] = p.Pid
	}
	return out, err
}

func (d *legacy) OOMKills(path string) (uint64, error) {
	return counter(filepath.Join(d.mounts["memory"], clean(path), "memory.oom_control"), "oom_kill")
}
