package listen

import (
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/podvisor/podvisor/pod/mountinfo"
)

func TestParseMountinfo(t *testing.T) {
	hybrid := `25 30 0:23 / /sys rw,nosuid shared:7 - sysfs sysfs rw
34 25 0:29 / /sys/fs/cgroup ro shared:9 - tmpfs tmpfs ro,mode=755
35 34 0:30 / /sys/fs/cgroup/unified rw,nosuid shared:10 - cgroup2 cgroup2 rw,nsdelegate
36 34 0:31 / /sys/fs/cgroup/memory rw shared:11 - cgroup cgroup rw,memory
`
	parseMountinfo := func(r io.Reader) (Hierarchy, error) {
		ms, err := mountinfo.Parse(r)
		if err != nil {
			return Hierarchy{}, err
		}
		return hierarchyOf(ms)
	}
	h, err := parseMountinfo(strings.NewReader(hybrid))
	if err != nil || h.Mount != "/sys/fs/cgroup/unified" || !h.Hybrid {
		t.Fatalf("hybrid: %+v %v", h, err)
	}
	unified := `35 34 0:30 / /sys/fs/cgroup\040x rw shared:10 - cgroup2 cgroup2 rw` + "\n"
	h, err = parseMountinfo(strings.NewReader(unified))
	if err != nil || h.Mount != "/sys/fs/cgroup x" || h.Hybrid {
		t.Fatalf("unified: %+v %v", h, err)
	}
	if _, err := parseMountinfo(strings.NewReader("garbage\n36 34 0:31 / /x rw - cgroup cgroup rw\n")); err == nil {
		t.Fatal("no cgroup2 mount and no error")
	}
}

func TestHierarchyDirStaysInside(t *testing.T) {
	h := Hierarchy{Mount: "/sys/fs/cgroup/unified"}
	if d, err := h.Dir("podvisor/burstable/pod1/c"); err != nil || d != "/sys/fs/cgroup/unified/podvisor/burstable/pod1/c" {
		t.Fatalf("Dir = %q, %v", d, err)
	}
	for _, bad := range []string{"", "/", "..", "a/../../etc", "a/./b", "a//b", "../x"} {
		if d, err := h.Dir(bad); err == nil {
			t.Errorf("Dir(%q) = %q, want an error", bad, d)
		}
	}
}

func TestDecodeWireEvent(t *testing.T) {
	b := make([]byte, wireEventSize)
	ne := binary.NativeEndian
	ne.PutUint64(b[0:], 42)
	ne.PutUint64(b[8:], 9)
	ne.PutUint64(b[16:], 3)
	ne.PutUint32(b[24:], 8080)
	ne.PutUint32(b[28:], 10)
	ne.PutUint32(b[32:], uint32(Closed))
	e, ok := decodeWireEvent(b)
	if !ok || e.Kind != Closed || e.Cgroup != 42 || e.Socket != 9 || e.NetNS != 3 || e.Port != 8080 || e.Family != 10 {
		t.Fatalf("decoded %v %v", e, ok)
	}
	if _, ok := decodeWireEvent(b[:wireEventSize-1]); ok {
		t.Fatal("short event decoded")
	}
	ne.PutUint32(b[32:], 99)
	if _, ok := decodeWireEvent(b); ok {
		t.Fatal("unknown kind decoded")
	}
}

// diagMsg is a struct inet_diag_msg for a listener, with attrs after it.
func diagMsg(state byte, port uint16, cookie uint64, attrs ...[]byte) []byte {
	b := make([]byte, inetDiagMsgSize)
	ne := binary.NativeEndian
	b[0], b[1] = 10, state
	binary.BigEndian.PutUint16(b[4:], port)
	ne.PutUint32(b[44:], uint32(cookie))
	ne.PutUint32(b[48:], uint32(cookie>>32))
	ne.PutUint32(b[68:], 777)
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

func attr(typ uint16, payload []byte) []byte {
	a := make([]byte, 4, 4+len(payload)+3)
	binary.NativeEndian.PutUint16(a, uint16(4+len(payload)))
	binary.NativeEndian.PutUint16(a[2:], typ)
	a = append(a, payload...)
	for len(a)%4 != 0 {
		a = append(a, 0)
	}
	return a
}

func TestParseDiagMsg(t *testing.T) {
	id := make([]byte, 8)
	binary.NativeEndian.PutUint64(id, 1234)
	d, ok := parseDiagMsg(diagMsg(tcpListen, 443, 1<<33|5, attr(5, []byte{1}), attr(inetDiagCgroupID, id)))
	if !ok || d.Port != 443 || d.Cookie != 1<<33|5 || d.Family != 10 || !d.hasCgroup || d.cgroup != 1234 || d.inode != 777 {
		t.Fatalf("parsed %+v %v", d, ok)
	}
	if d, ok := parseDiagMsg(diagMsg(tcpListen, 80, 1)); !ok || d.hasCgroup {
		t.Fatalf("without the cgroup attribute: %+v %v", d, ok)
	}
	if _, ok := parseDiagMsg(diagMsg(1, 80, 1)); ok {
		t.Fatal("an established socket parsed as a listener")
	}
	if _, ok := parseDiagMsg(diagMsg(tcpListen, 80, 1)[:inetDiagMsgSize-1]); ok {
		t.Fatal("a short message parsed")
	}
	// Attributes that lie about their length stop the parse, not the program.
	bad := diagMsg(tcpListen, 80, 1, []byte{200, 0, 21, 0, 1, 2, 3, 4})
	if d, ok := parseDiagMsg(bad); !ok || d.hasCgroup {
		t.Fatalf("lying attribute: %+v %v", d, ok)
	}
	short := diagMsg(tcpListen, 80, 1, attr(inetDiagCgroupID, []byte{1, 2}))
	if d, ok := parseDiagMsg(short); !ok || d.hasCgroup {
		t.Fatalf("short cgroup attribute: %+v %v", d, ok)
	}
}

func FuzzParseDiagMsg(f *testing.F) {
	f.Add(diagMsg(tcpListen, 80, 1, attr(inetDiagCgroupID, make([]byte, 8))))
	f.Fuzz(func(t *testing.T, b []byte) { parseDiagMsg(b) })
}
