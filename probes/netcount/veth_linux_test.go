package netcount

import (
	"encoding/binary"
	"syscall"
	"testing"
)

// rtLink builds one RTM_NEWLINK message as the kernel sends it.
func rtLink(index int32, flags uint32, attrs map[uint16][]byte) []byte {
	body := make([]byte, syscall.SizeofIfInfomsg)
	binary.NativeEndian.PutUint32(body[4:], uint32(index))
	binary.NativeEndian.PutUint32(body[8:], flags)
	for _, typ := range []uint16{iflaIfname, iflaLink, iflaLinkinfo, iflaLinkNetnsID} {
		v, ok := attrs[typ]
		if !ok {
			continue
		}
		a := make([]byte, 4+len(v))
		binary.NativeEndian.PutUint16(a[0:], uint16(4+len(v)))
		binary.NativeEndian.PutUint16(a[2:], typ)
		copy(a[4:], v)
		for len(a)%4 != 0 {
			a = append(a, 0)
		}
		body = append(body, a...)
	}
	msg := make([]byte, syscall.SizeofNlMsghdr, syscall.SizeofNlMsghdr+len(body))
	binary.NativeEndian.PutUint32(msg[0:], uint32(syscall.SizeofNlMsghdr+len(body)))
	binary.NativeEndian.PutUint16(msg[4:], syscall.RTM_NEWLINK)
	return append(msg, body...)
}

func u32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// linkinfo is IFLA_LINKINFO holding IFLA_INFO_KIND kind (and, as the
// kernel sends it, IFLA_INFO_DATA before it would follow; here none).
func linkinfo(kind string) []byte {
	v := append([]byte(kind), 0)
	a := binary.NativeEndian.AppendUint16(nil, uint16(4+len(v)))
	a = binary.NativeEndian.AppendUint16(a, iflaInfoKind)
	return append(a, v...)
}

func TestParseLinksFindsTheHostPeer(t *testing.T) {
	dump := append(rtLink(1, syscall.IFF_LOOPBACK, map[uint16][]byte{iflaIfname: []byte("lo\x00")}),
		rtLink(2, 0, map[uint16][]byte{iflaIfname: []byte("eth0\x00"), iflaLink: u32(17), iflaLinkinfo: linkinfo("veth"), iflaLinkNetnsID: u32(0)})...)
	links, err := parseLinks(dump)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 || links[0].name != "lo" || !links[0].loopback || links[1].name != "eth0" || links[1].index != 2 ||
		links[1].kind != "veth" || links[1].peer != 17 || !links[1].peerAway {
		t.Fatalf("parsed %+v", links)
	}
	pod, ok := hostPeer(links)
	if !ok || pod.peer != 17 {
		t.Fatalf("hostPeer = %+v, %v; want peer 17", pod, ok)
	}
	host := []nsLink{{index: 1, name: "lo", loopback: true}, {index: 17, name: "veth1", kind: "veth", peer: 2, peerAway: true}}
	if name, ok := hostSide(pod, host); !ok || name != "veth1" {
		t.Fatalf("hostSide = %q, %v; want veth1", name, ok)
	}
}

// A namespace with only loopback, a link whose peer is in the same
// namespace (a veth pair inside the pod), or a macvlan (its "peer" is its
// parent, the host's NIC), has no host side.
func TestNoHostPeer(t *testing.T) {
	for name, links := range map[string][]nsLink{
		"loopback only":   {{name: "lo", loopback: true}},
		"peer in the pod": {{name: "lo", loopback: true}, {name: "a", kind: "veth", peer: 4}},
		"macvlan":         {{name: "lo", loopback: true}, {name: "eth0", kind: "macvlan", peer: 2, peerAway: true}},
		"no links":        nil,
	} {
		if l, ok := hostPeer(links); ok {
			t.Errorf("%s: hostPeer = %+v, want none", name, l)
		}
	}
}

// The host's link at the index the pod's veth names is its peer only if
// it is a veth whose peer is the pod's: else the peer is in a third
// namespace and the host's link is another one.
func TestHostSideIsThePeer(t *testing.T) {
	pod := nsLink{index: 3, name: "eth0", kind: "veth", peer: 2, peerAway: true}
	for name, host := range map[string][]nsLink{
		"a NIC":                {{index: 2, name: "eth0"}},
		"another pod's veth":   {{index: 2, name: "veth9", kind: "veth", peer: 5, peerAway: true}},
		"a veth in the host":   {{index: 2, name: "veth9", kind: "veth", peer: 3}},
		"no link at the index": {{index: 7, name: "veth9", kind: "veth", peer: 3, peerAway: true}},
	} {
		if got, ok := hostSide(pod, host); ok {
			t.Errorf("%s: hostSide = %q", name, got)
		}
	}
}

func TestReadVethRefusesPaths(t *testing.T) {
	for _, name := range []string{"", "..", ".", "a/../../etc", "x\x00"} {
		if _, err := ReadVeth(name); err == nil {
			t.Errorf("ReadVeth(%q) succeeded", name)
		}
	}
}
