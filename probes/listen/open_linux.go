package listen

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/probes/bpfcgroup"
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
	have := func(name string, err error) bool { return bpfcgroup.Have(&f.Inconclusive, name, err) }
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
	var memlock []string
	bpfcgroup.RemoveMemlock(&memlock)
	detect := o.detect
	if detect == nil {
		detect = DetectFeatures
	}
	f := detect()
	f.Inconclusive = append(f.Inconclusive, memlock...)
	if o.Logf != nil && len(f.Inconclusive) > 0 {
		o.Logf("listen watcher: inconclusive eBPF feature probes: %v", f.Inconclusive)
	}
	return newSockOpsWatcher(f, o.MaxCgroups, o.Logf)
}
