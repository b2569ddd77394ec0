// Package netcount counts the bytes and packets each pod sends and
// receives, from the cheapest source the pod has:
//
//   - [SourceVeth]: a pod with a network namespace of its own, attached
//     to the host by a veth pair (a CNI network), is counted by the host
//     side's interface statistics (/sys/class/net/<veth>/statistics):
//     the kernel keeps them anyway, so reading them costs four small
//     files and counting costs nothing.
//   - [SourceEBPF]: any other pod is counted by two cgroup_skb programs
//     (ingress and egress) attached to its cgroup2 directory, adding each
//     packet's length to the pod's slot of one per-CPU array sized for
//     the device's max pods. The programs are written with
//     cilium/ebpf/asm (no clang, no CO-RE, no kernel BTF), always return
//     "allow" (counting never drops a packet) and are attached as one
//     of many (bpf_link, or BPF_F_ALLOW_MULTI), so other programs on the
//     cgroup keep working.
//
// Without either the pod's counters are absent, never guessed. The eBPF
// counters count from the moment the daemon watches the pod: a restarted
// daemon starts them again from zero, as an interface's counters do when
// it is re-created.
//
// Bytes are what the kernel's skb length says at the hook: the IP packet
// (headers included) for cgroup_skb, the Ethernet frame for a veth.
package netcount

import "errors"

// Source is where a pod's counters come from.
type Source string

const (
	// SourceEBPF: cgroup_skb programs on the pod's cgroup2 directory.
	SourceEBPF Source = "ebpf-cgroup-skb"
	// SourceVeth: the host side of the pod's veth pair.
	SourceVeth Source = "veth"
)

// Counters are a pod's traffic since counting began. Rx is what the pod
// received, Tx what it sent.
type Counters struct {
	RxBytes   uint64 `json:"rxBytes"`
	RxPackets uint64 `json:"rxPackets"`
	TxBytes   uint64 `json:"txBytes"`
	TxPackets uint64 `json:"txPackets"`
}

// Add returns c plus o.
func (c Counters) Add(o Counters) Counters {
	return Counters{c.RxBytes + o.RxBytes, c.RxPackets + o.RxPackets, c.TxBytes + o.TxBytes, c.TxPackets + o.TxPackets}
}

// sum adds the per-CPU values of one slot.
func sum(perCPU []Counters) Counters {
	var t Counters
	for _, c := range perCPU {
		t = t.Add(c)
	}
	return t
}

// fromHostSide turns the host side's interface statistics into the pod's:
// what the host side receives, the pod sent.
func fromHostSide(hostRx, hostRxPackets, hostTx, hostTxPackets uint64) Counters {
	return Counters{RxBytes: hostTx, RxPackets: hostTxPackets, TxBytes: hostRx, TxPackets: hostRxPackets}
}

// ErrFull is Watch's error when every slot of the map is taken.
var ErrFull = errors.New("every network counter slot is in use (max pods reached)")

// Options configure Open.
type Options struct {
	// MaxPods sizes the counter map: at most this many cgroups are
	// counted at once. Default 110, the kubelet's maxPods.
	MaxPods int
	// Logf receives what Open cannot return as an error (inconclusive
	// feature probes).
	Logf func(format string, args ...any)
}
