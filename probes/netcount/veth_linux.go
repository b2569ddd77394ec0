package netcount

import (
	"encoding/binary"
	"fmt"
	"net"
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
	iflaLinkNetnsID = 37
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
	idx, ok := hostPeer(peers)
	if !ok {
		return "", fmt.Errorf("network namespace %s has no veth to another namespace", netns)
	}
	ifc, err := net.InterfaceByIndex(idx)
	if err != nil {
		return "", fmt.Errorf("host side (ifindex %d) of the veth of %s: %w", idx, netns, err)
	}
	return ifc.Name, nil
}

// link is what rtnetlink says of one interface.
type nsLink struct {
	name     string
	peer     int  // IFLA_LINK: the peer's ifindex, 0 if none
	peerAway bool // IFLA_LINK_NETNSID: the peer is in another namespace
	loopback bool
}

// hostPeer picks the ifindex of the first link's peer in another
// namespace: the pod's eth0 ↔ the host's veth.
func hostPeer(links []nsLink) (int, bool) {
	for _, l := range links {
		if !l.loopback && l.peer > 0 && l.peerAway {
			return l.peer, true
		}
	}
	return 0, false
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
		flags := binary.NativeEndian.Uint32(m.Data[8:12]) // ifinfomsg.ifi_flags
		l := nsLink{loopback: flags&syscall.IFF_LOOPBACK != 0}
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
			}
		}
		out = append(out, l)
	}
	return out, nil
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
