package listen

import (
	"errors"
	"fmt"
	"os"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/rlimit"
	"golang.org/x/sys/unix"
)

// Features is what the kernel offers the eBPF path, from cilium/ebpf's
// features package: a probe that answers nil is supported, one that
// answers ErrNotSupported is not, and any other answer (no privilege,
// a kernel quirk) counts as unsupported and is listed in Inconclusive.
type Features struct {
	SockOps     bool // BPF_PROG_TYPE_SOCK_OPS with bpf_sock_ops_cb_flags_set and bpf_get_socket_cookie
	RingBuf     bool // BPF_MAP_TYPE_RINGBUF and bpf_ringbuf_output (5.8+); else a perf buffer
	PerfOutput  bool // bpf_perf_event_output from sock_ops
	NetNSCookie bool // bpf_get_netns_cookie from sock_ops
	ListenCB    bool // kernel 4.20+: BPF_SOCK_OPS_TCP_LISTEN_CB exists
	// SockRelease: cgroup/sock_release programs (5.9+) with the cookie
	// and output helpers, to see the close of listeners that predate
	// the watch; ReleaseNetNS: with bpf_get_netns_cookie.
	SockRelease  bool
	ReleaseNetNS bool
	Cgroup2      bool // a cgroup2 hierarchy is mounted
	// Inconclusive lists the probes that answered neither yes nor no.
	Inconclusive []string
}

// DetectFeatures probes the kernel.
func DetectFeatures() Features {
	var f Features
	have := func(name string, err error) bool {
		switch {
		case err == nil:
			return true
		case !errors.Is(err, ebpf.ErrNotSupported):
			f.Inconclusive = append(f.Inconclusive, fmt.Sprintf("%s: %v", name, err))
		}
		return false
	}
	helper := func(pt ebpf.ProgramType, fn asm.BuiltinFunc) bool {
		return have(pt.String()+" "+fn.String(), features.HaveProgramHelper(pt, fn))
	}
	f.SockOps = have("sock_ops programs", features.HaveProgramType(ebpf.SockOps)) &&
		helper(ebpf.SockOps, asm.FnSockOpsCbFlagsSet) && helper(ebpf.SockOps, asm.FnGetSocketCookie)
	if f.SockOps {
		f.RingBuf = have("ring buffer", features.HaveMapType(ebpf.RingBuf)) && helper(ebpf.SockOps, asm.FnRingbufOutput)
		f.PerfOutput = helper(ebpf.SockOps, asm.FnPerfEventOutput)
		f.NetNSCookie = helper(ebpf.SockOps, asm.FnGetNetnsCookie)
	}
	f.ListenCB = kernelAtLeast(4, 20)
	if f.SockOps && kernelAtLeast(5, 9) {
		out := asm.FnPerfEventOutput
		if f.RingBuf {
			out = asm.FnRingbufOutput
		}
		f.SockRelease = helper(ebpf.CGroupSock, asm.FnGetSocketCookie) && helper(ebpf.CGroupSock, out)
		f.ReleaseNetNS = f.SockRelease && helper(ebpf.CGroupSock, asm.FnGetNetnsCookie)
	}
	_, err := FindHierarchy()
	f.Cgroup2 = err == nil
	return f
}

// EBPFUsable says why the eBPF path cannot run, or nil.
func (f Features) EBPFUsable() error {
	switch {
	case !f.Cgroup2:
		return errors.New("no cgroup2 hierarchy to attach sock_ops programs to")
	case !f.SockOps:
		return fmt.Errorf("sock_ops programs unavailable (inconclusive probes: %v)", f.Inconclusive)
	case !f.ListenCB:
		return errors.New("kernel older than 4.20 has no sock_ops listen callback")
	case !f.RingBuf && !f.PerfOutput:
		return errors.New("neither ring buffer nor perf output from sock_ops")
	}
	return nil
}

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		return false
	}
	return ma > major || ma == major && mi >= minor
}

// Options configure Open.
type Options struct {
	// MaxCgroups is how many cgroups may be watched at once (the device's
	// max pods): Watch refuses more, and it sizes the eBPF event buffer.
	// Default 110, the kubelet's maxPods.
	MaxCgroups int
	// Paths are the paths to try, in order. Default: eBPF, then sock_diag.
	Paths []Path
	// Logf receives what the watcher cannot return as an error.
	Logf func(format string, args ...any)

	detect func() Features // DetectFeatures; tests refuse eBPF with it
}

// Open returns a watcher on the first of the paths that works here. When
// none does, the error says why each failed and the caller probes
// periodically ([PathPeriodic]).
func Open(o Options) (Watcher, error) {
	if o.MaxCgroups <= 0 {
		o.MaxCgroups = 110
	}
	if o.Paths == nil {
		o.Paths = []Path{PathEBPF, PathSockDiag}
	}
	var errs []error
	for _, p := range o.Paths {
		var w Watcher
		var err error
		switch p {
		case PathEBPF:
			w, err = openEBPF(o)
		case PathSockDiag:
			w, err = newSockDiagWatcher(o.MaxCgroups, o.Logf)
		default:
			err = fmt.Errorf("unknown listen watcher path %q", p)
		}
		if err == nil {
			if len(errs) > 0 && o.Logf != nil {
				o.Logf("listen watcher: using %s: %v", p, errors.Join(errs...))
			}
			return w, nil
		}
		errs = append(errs, fmt.Errorf("%s unavailable: %w", p, err))
	}
	if len(errs) == 0 {
		return nil, errors.New("no listen watcher path to try")
	}
	return nil, errors.Join(errs...)
}

func openEBPF(o Options) (Watcher, error) {
	// Before 5.11 eBPF memory counts against RLIMIT_MEMLOCK; after, this
	// is a no-op. Failing is not fatal: the feature probes say what works.
	memlock := rlimit.RemoveMemlock()
	detect := o.detect
	if detect == nil {
		detect = DetectFeatures
	}
	f := detect()
	if memlock != nil {
		f.Inconclusive = append(f.Inconclusive, fmt.Sprintf("raise RLIMIT_MEMLOCK: %v", memlock))
	}
	if o.Logf != nil && len(f.Inconclusive) > 0 {
		o.Logf("listen watcher: inconclusive eBPF feature probes: %v", f.Inconclusive)
	}
	return newSockOpsWatcher(f, o.MaxCgroups, o.Logf)
}

// legacyAttachment is a program attached with BPF_PROG_ATTACH, as
// kernels before 5.7 must: it stays attached until detached, even after
// the process that attached it dies.
type legacyAttachment struct {
	cgroup *os.File
	prog   *ebpf.Program
	attach ebpf.AttachType
}

func attachLegacy(dir string, attach ebpf.AttachType, prog *ebpf.Program) (*legacyAttachment, error) {
	cg, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	err = link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: int(cg.Fd()), Program: prog, Attach: attach, Flags: unix.BPF_F_ALLOW_MULTI,
	})
	if err != nil {
		cg.Close()
		return nil, err
	}
	return &legacyAttachment{cgroup: cg, prog: prog, attach: attach}, nil
}

func (l *legacyAttachment) Close() error {
	defer l.cgroup.Close()
	return link.RawDetachProgram(link.RawDetachProgramOptions{
		Target: int(l.cgroup.Fd()), Program: l.prog, Attach: l.attach,
	})
}

// DetachLeftovers is detachLeftovers, for the other cgroup programs of
// podvisor (probes/netcount) that attach the same way.
func DetachLeftovers(dir string, attach ebpf.AttachType, name string) error {
	return detachLeftovers(dir, attach, name)
}

// detachLeftovers detaches the programs called name that are attached
// to dir for attach without a bpf_link: what a killed podvisor left with
// BPF_PROG_ATTACH. Programs attached through links belong to a live
// process and are left alone.
func detachLeftovers(dir string, attach ebpf.AttachType, name string) error {
	progs, err := attachedPrograms(dir, attach)
	if err != nil {
		return err
	}
	cg, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer cg.Close()
	var errs []error
	for _, ap := range progs {
		if _, isLink := ap.LinkID(); isLink {
			continue
		}
		prog, err := ebpf.NewProgramFromID(ap.ID)
		if err != nil {
			continue // gone meanwhile
		}
		if info, err := prog.Info(); err == nil && info.Name == name {
			if err := link.RawDetachProgram(link.RawDetachProgramOptions{Target: int(cg.Fd()), Program: prog, Attach: attach}); err != nil {
				errs = append(errs, fmt.Errorf("detach leftover %s program %d from %s: %w", name, ap.ID, dir, err))
			}
		}
		prog.Close()
	}
	return errors.Join(errs...)
}

// attachedPrograms are the programs attached to dir itself for attach.
func attachedPrograms(dir string, attach ebpf.AttachType) ([]link.AttachedProgram, error) {
	cg, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer cg.Close()
	r, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: attach})
	if err != nil {
		return nil, fmt.Errorf("query %s programs of %s: %w", attach, dir, err)
	}
	return r.Programs, nil
}
