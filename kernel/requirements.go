// Package kernel says what podvisor needs from a device's kernel and checks
// a kernel configuration (a .config, /proc/config.gz or /boot/config-*)
// against it, naming each missing option and what its absence costs.
package kernel

// Need is how much podvisor depends on an option.
type Need int

const (
	// Required: the daemon cannot do its job without it.
	Required Need = iota
	// Containerd: needed for containerd pods (runc, snapshots, networks);
	// devices running only process pods may leave it out.
	Containerd
	// Recommended: podvisor works without it, at the cost named.
	Recommended
)

func (n Need) String() string {
	switch n {
	case Required:
		return "required"
	case Containerd:
		return "containerd"
	default:
		return "recommended"
	}
}

// Requirement is one kernel option (or a set of which any one will do).
type Requirement struct {
	// AnyOf lists the options that satisfy it; the first is the usual one.
	AnyOf []string
	Need  Need
	// For says what podvisor uses it for.
	For string
	// Cost says what a device loses without it.
	Cost string
}

// MinVersion is the oldest kernel podvisor runs on: pidfd_open (5.3) is how
// it waits for the processes it supervises without polling.
var MinVersion = Version{5, 3}

// Requirements lists every option podvisor looks for, most important first.
var Requirements = []Requirement{
	{[]string{"CONFIG_CGROUPS"}, Required, "a cgroup per pod and container",
		"no limits and no accounting: the daemon refuses to start"},
	{[]string{"CONFIG_MEMCG"}, Required, "memory limits, OOM-kill detection (memory.events), eviction ranking by usage",
		"memory limits are not enforced and OOM kills are not told from other kills"},
	{[]string{"CONFIG_CGROUP_SCHED"}, Required, "CPU requests as cpu.weight / cpu.shares",
		"every container gets the same CPU share whatever it requests"},
	{[]string{"CONFIG_EPOLL"}, Required, "the Go runtime's poller", "nothing runs"},
	{[]string{"CONFIG_INOTIFY_USER"}, Required, "watching the manifests directory",
		"manifest changes are not noticed"},
	{[]string{"CONFIG_FHANDLE"}, Recommended, "systemd and containerd's cgroup handling", "systemd may not boot"},
	{[]string{"CONFIG_CFS_BANDWIDTH"}, Recommended, "CPU limits as cpu.max / cfs_quota_us",
		"CPU limits are not enforced"},
	{[]string{"CONFIG_CGROUP_PIDS"}, Recommended, "pod PID limits and PID-pressure eviction ranking",
		"a fork bomb in one pod can exhaust the device's PIDs"},
	{[]string{"CONFIG_BLK_CGROUP"}, Recommended, "I/O accounting and weights (io controller)",
		"no per-pod I/O accounting"},
	{[]string{"CONFIG_PSI"}, Recommended, "PSI triggers: memory pressure noticed within 150 ms",
		"memory pressure is seen only through thresholds and the periodic check, so evictions start later"},
	{[]string{"CONFIG_NAMESPACES"}, Recommended, "pod sandboxes", "no namespaces of any kind"},
	{[]string{"CONFIG_PID_NS"}, Recommended, "shareProcessNamespace and the per-pod init",
		"pods asking for a shared process namespace fail to start"},
	{[]string{"CONFIG_NET_NS"}, Recommended, "pods with hostNetwork: false",
		"process pods must use the host's network; containerd pods cannot start"},
	{[]string{"CONFIG_IPC_NS"}, Recommended, "pods with hostIPC: false", "process pods share the host's IPC namespace"},
	{[]string{"CONFIG_UTS_NS"}, Recommended, "a pod's own hostname", "pods see the device's hostname"},
	{[]string{"CONFIG_BPF_SYSCALL"}, Recommended, "eBPF listen probes and per-pod network counters",
		"probes fall back to sock_diag (about 1 s to notice a listener instead of milliseconds); no NET-IN/NET-OUT"},
	{[]string{"CONFIG_CGROUP_BPF"}, Recommended, "attaching sock_ops and cgroup_skb programs to pod cgroups",
		"probes fall back to sock_diag; no NET-IN/NET-OUT"},
	{[]string{"CONFIG_BPF_JIT"}, Recommended, "compiling eBPF programs to native code",
		"eBPF programs are interpreted: more CPU per socket event and packet"},
	{[]string{"CONFIG_INET_DIAG"}, Recommended, "the sock_diag fallback of listen probes",
		"without eBPF too, probes run only on their periods"},
	{[]string{"CONFIG_INET_TCP_DIAG"}, Recommended, "dumping TCP listeners for the sock_diag fallback",
		"without eBPF too, probes run only on their periods"},
	{[]string{"CONFIG_TMPFS"}, Recommended, "emptyDir with medium: Memory", "memory-backed emptyDirs fail to mount"},
	{[]string{"CONFIG_SECCOMP_FILTER"}, Containerd, "seccomp profiles (RuntimeDefault) applied by runc",
		"containerd pods asking for a seccomp profile fail to start"},
	{[]string{"CONFIG_OVERLAY_FS"}, Containerd, "containerd's overlayfs snapshotter",
		"containerd falls back to the native snapshotter: a full copy of every image layer"},
	{[]string{"CONFIG_POSIX_MQUEUE"}, Containerd, "the /dev/mqueue mount runc makes in every container",
		"containerd containers fail to start"},
	{[]string{"CONFIG_VETH"}, Containerd, "a pod network's host-side interface (CNI bridge)",
		"containerd pods with their own network cannot start"},
	{[]string{"CONFIG_BRIDGE"}, Containerd, "the CNI bridge plugin's bridge",
		"containerd pods with their own network cannot start"},
	{[]string{"CONFIG_NF_NAT", "CONFIG_NF_NAT_IPV4"}, Containerd, "hostPort mappings and outbound masquerading",
		"containerd pods reach no other network and hostPort does not work"},
}
