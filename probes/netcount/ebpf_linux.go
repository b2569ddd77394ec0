package netcount

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"

	"github.com/podvisor/podvisor/probes/bpfcgroup"
	"github.com/podvisor/podvisor/probes/listen"
)

// Program names, found again after a kill -9 on kernels without cgroup
// bpf_link (BPF_OBJ_NAME_LEN is 16: 15 characters and a NUL).
const (
	progIngressName = "podvisor_net_in"
	progEgressName  = "podvisor_netout"
	progLicense     = "Dual MIT/GPL"
	mapName         = "podvisor_net"
)

// Offsets: struct __sk_buff's len (stable UAPI, so no BTF is read) and
// the counters in a slot's value (Counters' fields, in order).
const (
	skbLen         = 0
	offRxBytes     = 0
	offTxBytes     = 16
	slotKeyOnStack = -4
)

// Features is what the kernel offers the counters, from cilium/ebpf's
// features package: nil is supported, ErrNotSupported is not, and any
// other answer counts as unsupported and is listed in Inconclusive.
type Features struct {
	CgroupSKB   bool // BPF_PROG_TYPE_CGROUP_SKB with bpf_map_lookup_elem
	PerCPUArray bool // BPF_MAP_TYPE_PERCPU_ARRAY
	Cgroup2     bool // a cgroup2 hierarchy is mounted
	// Inconclusive lists the probes that answered neither yes nor no.
	Inconclusive []string
}

// DetectFeatures probes the kernel.
func DetectFeatures() Features {
	var f Features
	have := func(name string, err error) bool { return bpfcgroup.Have(&f.Inconclusive, name, err) }
	f.CgroupSKB = have("cgroup_skb programs", features.HaveProgramType(ebpf.CGroupSKB)) &&
		have("cgroup_skb map_lookup_elem", features.HaveProgramHelper(ebpf.CGroupSKB, asm.FnMapLookupElem))
	f.PerCPUArray = have("per-CPU array maps", features.HaveMapType(ebpf.PerCPUArray))
	_, err := listen.FindHierarchy()
	f.Cgroup2 = err == nil
	return f
}

// Usable says why the counters cannot run, or nil.
func (f Features) Usable() error {
	switch {
	case !f.Cgroup2:
		return errors.New("no cgroup2 hierarchy to attach cgroup_skb programs to")
	case !f.CgroupSKB:
		return fmt.Errorf("cgroup_skb programs unavailable (inconclusive probes: %v)", f.Inconclusive)
	case !f.PerCPUArray:
		return fmt.Errorf("per-CPU array maps unavailable (inconclusive probes: %v)", f.Inconclusive)
	}
	return nil
}

// Counter counts pods' traffic with cgroup_skb programs, one pair per
// watched cgroup, into one per-CPU array.
//
// Nothing is pinned: a bpf_link lives as long as its fd, so a killed
// daemon's programs detach with it and a restarted one attaches afresh.
// On kernels without cgroup bpf_link (before 5.7) the attachment
// outlives the process; Watch detaches such leftovers, found by name.
type Counter struct {
	counts *ebpf.Map // per-CPU array: slot → Counters
	legacy bool      // attach with BPF_PROG_ATTACH even where bpf_link works (tests)

	mu     sync.Mutex
	slots  []bool // taken
	byID   map[uint64]*watched
	closed bool
}

type watched struct {
	slot uint32
	bpfcgroup.Attachments
}

// Open makes the counter map, after checking that the kernel can run the
// programs.
func Open(o Options) (*Counter, error) {
	if o.MaxPods <= 0 {
		o.MaxPods = 110
	}
	var memlock []string
	bpfcgroup.RemoveMemlock(&memlock)
	f := DetectFeatures()
	f.Inconclusive = append(f.Inconclusive, memlock...)
	if o.Logf != nil && len(f.Inconclusive) > 0 {
		o.Logf("network counters: inconclusive eBPF feature probes: %v", f.Inconclusive)
	}
	if err := f.Usable(); err != nil {
		return nil, err
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Name: mapName, Type: ebpf.PerCPUArray,
		KeySize: 4, ValueSize: 32, MaxEntries: uint32(o.MaxPods)})
	if err != nil {
		return nil, fmt.Errorf("make network counter map: %w", err)
	}
	return &Counter{counts: m, slots: make([]bool, o.MaxPods), byID: map[uint64]*watched{}}, nil
}

// countProgram adds each packet's length and one packet to the slot's
// counters at off (Rx for ingress, Tx for egress) and lets it pass.
// The array is per-CPU, so plain loads and stores do not race.
func countProgram(counts int, slot uint32, off int16) asm.Instructions {
	return asm.Instructions{
		asm.LoadMem(asm.R7, asm.R1, skbLen, asm.Word),
		asm.StoreImm(asm.R10, slotKeyOnStack, int64(slot), asm.Word),
		asm.LoadMapPtr(asm.R1, counts),
		asm.Mov.Reg(asm.R2, asm.R10),
		asm.Add.Imm(asm.R2, slotKeyOnStack),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "pass"),
		asm.LoadMem(asm.R1, asm.R0, off, asm.DWord),
		asm.Add.Reg(asm.R1, asm.R7),
		asm.StoreMem(asm.R0, off, asm.R1, asm.DWord),
		asm.LoadMem(asm.R1, asm.R0, off+8, asm.DWord),
		asm.Add.Imm(asm.R1, 1),
		asm.StoreMem(asm.R0, off+8, asm.R1, asm.DWord),
		asm.Mov.Imm(asm.R0, 1).WithSymbol("pass"), // 1: allow, always
		asm.Return(),
	}
}

// Watch starts counting the traffic of the sockets in the cgroup2
// directory dir (and the cgroups below it) and returns its id. Watching
// a cgroup again is a no-op.
func (c *Counter) Watch(dir string) (uint64, error) {
	id, err := listen.CgroupID(dir)
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, errors.New("network counters are closed")
	}
	if _, ok := c.byID[id]; ok {
		return id, nil
	}
	slot := -1
	for i, taken := range c.slots {
		if !taken {
			slot = i
			break
		}
	}
	if slot < 0 {
		return 0, ErrFull
	}
	w := &watched{slot: uint32(slot)}
	if err := c.zero(w.slot); err != nil {
		return 0, err
	}
	for _, h := range []struct {
		name   string
		attach ebpf.AttachType
		off    int16
	}{{progIngressName, ebpf.AttachCGroupInetIngress, offRxBytes}, {progEgressName, ebpf.AttachCGroupInetEgress, offTxBytes}} {
		if err := c.attach(w, dir, h.name, h.attach, countProgram(c.counts.FD(), w.slot, h.off)); err != nil {
			w.Close()
			return 0, err
		}
	}
	c.slots[slot] = true
	c.byID[id] = w
	return id, nil
}

func (c *Counter) attach(w *watched, dir, name string, attach ebpf.AttachType, insns asm.Instructions) error {
	// Leftovers a killed daemon left attached without a link that cannot
	// be detached only cost double counting, which the next Watch retries:
	// no logf.
	return w.Add(dir, &ebpf.ProgramSpec{
		Name: name, Type: ebpf.CGroupSKB, AttachType: attach, Instructions: insns, License: progLicense,
	}, c.legacy, nil)
}

// zero clears a slot on every CPU.
func (c *Counter) zero(slot uint32) error {
	if err := c.counts.Put(slot, make([]Counters, ebpf.MustPossibleCPU())); err != nil {
		return fmt.Errorf("clear network counter slot %d: %w", slot, err)
	}
	return nil
}

// Read returns the cgroup's counters.
func (c *Counter) Read(id uint64) (Counters, error) {
	c.mu.Lock()
	w, ok := c.byID[id]
	c.mu.Unlock()
	if !ok {
		return Counters{}, fmt.Errorf("cgroup %d is not counted", id)
	}
	var perCPU []Counters
	if err := c.counts.Lookup(w.slot, &perCPU); err != nil {
		return Counters{}, fmt.Errorf("read network counters of cgroup %d: %w", id, err)
	}
	return sum(perCPU), nil
}

// Unwatch detaches the cgroup's programs and frees its slot.
func (c *Counter) Unwatch(id uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	w, ok := c.byID[id]
	if !ok {
		return fmt.Errorf("cgroup %d is not counted", id)
	}
	delete(c.byID, id)
	c.slots[w.slot] = false
	return w.Close()
}

// Close detaches every program and frees the map.
func (c *Counter) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	for id, w := range c.byID {
		errs = append(errs, w.Close())
		delete(c.byID, id)
	}
	return errors.Join(append(errs, c.counts.Close())...)
}
