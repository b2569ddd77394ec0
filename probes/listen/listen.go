// Package listen tells, per container cgroup, when a TCP socket starts or
// stops listening and on which port, so that a tcpSocket, httpGet or grpc
// probe can run the moment its port opens or closes instead of waiting
// for its next period.
//
// Two paths give the same events behind one [Watcher]:
//
//   - [PathEBPF]: a sock_ops program attached to each watched cgroup2
//     directory sees listen(2) (BPF_SOCK_OPS_TCP_LISTEN_CB) and, through
//     the state callback it enables on that socket, the listener's close
//     (BPF_SOCK_OPS_STATE_CB, LISTEN → CLOSE). Events reach user space
//     through a ring buffer (a perf buffer before kernel 5.8). The program
//     is written with cilium/ebpf/asm: no clang, no CO-RE, no kernel BTF.
//   - [PathSockDiag]: a NETLINK_SOCK_DIAG dump of listening TCP sockets in
//     the cgroup's network namespaces, matched to the cgroup by the
//     socket's cgroup id (INET_DIAG_CGROUP_ID, kernel 5.7+) or, without it,
//     by which of the cgroup's processes holds the socket. It runs on
//     demand ([Watcher.Rescan]): at container start and on a slow timer.
//
// [Open] picks the first path the kernel and the privileges allow and
// says which one it took; the caller falls back to periodic probes when
// neither is available ([PathPeriodic]).
//
// Sockets belong to the cgroup2 cgroup of the process that created them.
// On hybrid hosts (cgroup v1 controllers plus an empty cgroup2 mount) the
// container's processes must therefore also be placed in a cgroup under
// the cgroup2 mount: see [Hierarchy.Place].
package listen

import (
	"errors"
	"fmt"
	"time"
)

// ErrNotWatched is a cgroup the watcher does not watch (unwatched since).
var ErrNotWatched = errors.New("not watched")

// Path is how listeners are learnt.
type Path string

const (
	// PathEBPF: sock_ops programs on the watched cgroups; events within
	// microseconds of listen(2) and close(2).
	PathEBPF Path = "ebpf-sockops"
	// PathSockDiag: netlink sock_diag dumps, on demand.
	PathSockDiag Path = "sock_diag"
	// PathPeriodic: neither is available; probes keep their periods.
	PathPeriodic Path = "periodic"
)

// Kind says whether a socket entered or left the LISTEN state.
type Kind uint8

const (
	// Listening: a socket entered LISTEN.
	Listening Kind = 1
	// Closed: a listening socket left LISTEN (closed or disconnected).
	Closed Kind = 2
)

func (k Kind) String() string {
	switch k {
	case Listening:
		return "listening"
	case Closed:
		return "closed"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Event is one socket entering or leaving LISTEN in a watched cgroup.
type Event struct {
	Kind Kind
	// Cgroup is the id of the watched cgroup (what [Watcher.Watch]
	// returned), also when the socket belongs to a cgroup below it.
	Cgroup uint64
	// NetNS is the network namespace's cookie (SO_NETNS_COOKIE and
	// bpf_get_netns_cookie agree on it; kernel 5.14+), 0 where the kernel
	// cannot tell. Two pods listening on the same port in different
	// namespaces differ here.
	NetNS uint64
	// Family is unix.AF_INET or unix.AF_INET6.
	Family uint16
	// Port is the local port, in host byte order.
	Port uint16
	// Socket is the socket's cookie: listeners that share a port
	// (SO_REUSEPORT) are told apart by it.
	Socket uint64
	// Seen is when user space learnt of it.
	Seen time.Time
}

func (e Event) String() string {
	return fmt.Sprintf("%s cgroup=%d netns=%d family=%d port=%d socket=%d", e.Kind, e.Cgroup, e.NetNS, e.Family, e.Port, e.Socket)
}

// Watcher reports listeners in the cgroups it watches.
type Watcher interface {
	// Watch starts watching the cgroup2 directory dir (and the cgroups
	// below it) and returns its id. Listeners already open are reported
	// as Listening events.
	Watch(dir string) (uint64, error)
	// Unwatch stops watching the cgroup. Its listeners are not reported
	// as closed.
	Unwatch(id uint64) error
	// Rescan dumps the listeners of the cgroups now and reports what
	// changed; cgroups whose processes share a network namespace share one
	// dump of it (host-network pods all share the host's). It is how the
	// sock_diag path learns anything; on the eBPF path it repairs what a
	// lost event would have missed.
	Rescan(ids ...uint64) error
	// Events delivers the events. It is closed by Close.
	Events() <-chan Event
	// Path says which path this watcher takes.
	Path() Path
	// Close detaches and frees everything the watcher holds.
	Close() error
}
