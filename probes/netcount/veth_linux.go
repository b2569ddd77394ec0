package netcount

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/podvisor/podvisor/probes/netns"
)

// ifla* are the rtnetlink link attributes read (linux/if_link.h).
const (
	iflaIfname      = 3
	iflaLink        = 5
	iflaLinkinfo    = 18
	iflaLinkNetnsID = 37
	iflaInfoKind    = 1 // in IFLA_LINKINFO
)

// HostVeth finds the host side of the veth pair that connects the
// network namespace bound at netns to the host's (this process's)
// namespace and returns its interface name. It reads the namespace's
// links with rtnetlink from a thread that enters it (and is discarded if
// it cannot come back).
func HostVeth(netns string) (string, error) {
	peers, err := linksIn(netns)
	if err != nil {
		return "", err
	}
	pod, ok := hostPeer(peers)
	if !ok {
		return "", fmt.Errorf("network namespace %s has no veth to another namespace", netns)
	}
	msgs, err := syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	if err != nil {
		return "", fmt.Errorf("host links: %w", err)
	}
	host, err := parseLinks(msgs)
	if err != nil {
		return "", err
	}
	name, ok := hostSide(pod, host)
	if !ok {
		// Its peer is in a third namespace, and the host's interface with
		// that index is another one.
		return "", fmt.Errorf("the peer (ifindex %d) of %s's veth %s is not in this network namespace", pod.peer, netns, pod.name)
	}
	return name, nil
}

// link is what rtnetlink says of one interface.
type nsLink struct {
	index    int
	name     string
	kind     string // IFLA_INFO_KIND: "veth", "macvlan", ...; "" for a physical one
	peer     int    // IFLA_LINK: the peer's (or a macvlan's parent's) ifindex, 0 if none
	peerAway bool   // IFLA_LINK_NETNSID: the peer is in another namespace
	loopback bool
}

// hostPeer picks the first veth whose peer is in another namespace: the
// pod's eth0 ↔ the host's veth. A macvlan or ipvlan also names a link in
// another namespace, its parent: the host's NIC, whose counters are the
// whole host's.
func hostPeer(links []nsLink) (nsLink, bool) {
	for _, l := range links {
		if !l.loopback && l.kind == "veth" && l.peer > 0 && l.peerAway {
			return l, true
		}
	}
	return nsLink{}, false
}

// hostSide names the host link that is pod's peer: a veth at the index
// pod names whose own peer, in another namespace, has pod's index.
func hostSide(pod nsLink, host []nsLink) (string, bool) {
	for _, l := range host {
		if l.index == pod.peer {
			return l.name, l.kind == "veth" && l.peerAway && l.peer == pod.index
		}
	}
	return "", false
}

func linksIn(nsPath string) ([]nsLink, error) {
	msgs, err := netns.Do(nsPath, func() ([]byte, error) {
		return syscall.NetlinkRIB(syscall.RTM_GETLINK, syscall.AF_UNSPEC)
	})
	if err != nil {
		return nil, fmt.Errorf("links of %s: %w", nsPath, err)
	}
	return parseLinks(msgs)
}

// parseLinks decodes an RTM_GETLINK dump.
func parseLinks(b []byte) ([]nsLink, error) {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil, fmt.Errorf("parse link dump: %w", err)
	}
	var out []nsLink
	for i := range msgs {
		m := &msgs[i]
		if m.Header.Type != syscall.RTM_NEWLINK || len(m.Data) < syscall.SizeofIfInfomsg {
			continue
		}
		index := int(int32(binary.NativeEndian.Uint32(m.Data[4:8]))) // ifinfomsg.ifi_index
		flags := binary.NativeEndian.Uint32(m.Data[8:12])            // ifinfomsg.ifi_flags
		l := nsLink{index: index, loopback: flags&syscall.IFF_LOOPBACK != 0}
		attrs, err := syscall.ParseNetlinkRouteAttr(m)
		if err != nil {
			return nil, fmt.Errorf("parse link attributes: %w", err)
		}
		for _, a := range attrs {
			switch a.Attr.Type {
			case iflaIfname:
				l.name = strings.TrimRight(string(a.Value), "\x00")
			case iflaLink:
				if len(a.Value) >= 4 {
					l.peer = int(binary.NativeEndian.Uint32(a.Value))
				}
			case iflaLinkNetnsID:
				l.peerAway = true
			case iflaLinkinfo:
				l.kind = infoKind(a.Value)
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// infoKind reads IFLA_INFO_KIND from the nested attributes of
// IFLA_LINKINFO.
func infoKind(b []byte) string {
	for len(b) >= syscall.SizeofRtAttr {
		n := int(binary.NativeEndian.Uint16(b[0:2]))
		if n < syscall.SizeofRtAttr || n > len(b) {
			return ""
		}
		if binary.NativeEndian.Uint16(b[2:4])&0x3fff == iflaInfoKind { // without NLA_F_NESTED, NLA_F_NET_BYTEORDER
			return strings.TrimRight(string(b[syscall.SizeofRtAttr:n]), "\x00")
		}
		b = b[min((n+3)&^3, len(b)):]
	}
	return ""
}

// ReadVeth reads the pod's counters from the host side of its veth.
func ReadVeth(hostIfname string) (Counters, error) {
	if hostIfname == "" || strings.ContainsAny(hostIfname, "/\x00") || hostIfname == "." || hostIfname == ".." {
		return Counters{}, fmt.Errorf("interface name %q", hostIfname)
	}
	dir := filepath.Join("/sys/class/net", hostIfname, "statistics")
	var v [4]uint64
	for i, f := range []string{"rx_bytes", "rx_packets", "tx_bytes", "tx_packets"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			return Counters{}, fmt.Errorf("veth counters: %w", err)
		}
		if v[i], err = strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return Counters{}, fmt.Errorf("veth counters %s/%s: %w", dir, f, err)
		}
	}
	return fromHostSide(v[0], v[1], v[2], v[3]), nil
}
