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
	for _, typ := range []uint16{iflaIfname, iflaLink, iflaLinkNetnsID} {
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

func TestParseLinksFindsTheHostPeer(t *testing.T) {
	dump := append(rtLink(1, syscall.IFF_LOOPBACK, map[uint16][]byte{iflaIfname: []byte("lo\x00")}),
		rtLink(2, 0, map[uint16][]byte{iflaIfname: []byte("eth0\x00"), iflaLink: u32(17), iflaLinkNetnsID: u32(0)})...)
	links, err := parseLinks(dump)
	if err != nil {
		t.Fatal(err)
	}
	if len(links) != 2 || links[0].name != "lo" || !links[0].loopback || links[1].name != "eth0" || links[1].peer != 17 || !links[1].peerAway {
		t.Fatalf("parsed %+v", links)
	}
	if idx, ok := hostPeer(links); !ok || idx != 17 {
		t.Fatalf("hostPeer = %d, %v; want 17", idx, ok)
	}
}

// A namespace with only loopback, or a link whose peer is in the same
// namespace (a veth pair inside the pod), has no host side.
func TestNoHostPeer(t *testing.T) {
	for name, links := range map[string][]nsLink{
		"loopback only":   {{name: "lo", loopback: true}},
		"peer in the pod": {{name: "lo", loopback: true}, {name: "a", peer: 4}},
		"no links":        nil,
	} {
		if idx, ok := hostPeer(links); ok {
			t.Errorf("%s: hostPeer = %d, want none", name, idx)
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
