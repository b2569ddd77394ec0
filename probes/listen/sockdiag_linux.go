package listen

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/probes/netns"
)

// Wire constants of NETLINK_SOCK_DIAG (linux/inet_diag.h, linux/tcp_states.h).
const (
	tcpListen          = 10 // TCP_LISTEN
	inetDiagReqV2Size  = 56 // struct inet_diag_req_v2
	inetDiagMsgSize    = 72 // struct inet_diag_msg
	inetDiagCgroupID   = 21 // INET_DIAG_CGROUP_ID, kernel 5.7+
	sockDiagRecvBuffer = 32 << 10
)

// dumped is one listening socket of a sock_diag dump.
type dumped struct {
	socket
	cgroup    uint64 // the socket's cgroup2 id, if hasCgroup
	hasCgroup bool
	inode     uint32
}

// dumpListeners dumps the listening TCP sockets (IPv4 and IPv6) of the
// network namespace at nsPath (/proc/<pid>/ns/net), and that namespace's
// cookie (0 before kernel 5.14).
func dumpListeners(nsPath string) (uint64, []dumped, error) {
	fd, err := sockDiagSocketIn(nsPath)
	if err != nil {
		return 0, nil, err
	}
	defer unix.Close(fd)
	cookie, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		cookie = 0 // kernel before 5.14: namespaces are not told apart
	}
	var out []dumped
	for _, family := range []uint8{unix.AF_INET, unix.AF_INET6} {
		got, err := dumpFamily(fd, family)
		if err != nil {
			return 0, nil, fmt.Errorf("sock_diag dump (family %d) in %s: %w", family, nsPath, err)
		}
		for i := range got {
			got[i].NetNS = cookie
		}
		out = append(out, got...)
	}
	return cookie, out, nil
}

// sockDiagSocketIn opens a NETLINK_SOCK_DIAG socket in the network
// namespace at nsPath: a socket dumps the namespace it was made in. The
// thread that enters the namespace is thrown away if it cannot return.
func sockDiagSocketIn(nsPath string) (int, error) {
	open := func() (int, error) {
		return unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	}
	if netns.Same(nsPath) {
		return open()
	}
	return netns.Do(nsPath, func() (int, error) {
		fd, err := open()
		if err != nil {
			err = fmt.Errorf("sock_diag socket in %s: %w", nsPath, err)
		}
		return fd, err
	})
}

// dumpFamily sends one SOCK_DIAG_BY_FAMILY dump request for listening
// TCP sockets and reads the answer.
func dumpFamily(fd int, family uint8) ([]dumped, error) {
	req := make([]byte, unix.SizeofNlMsghdr+inetDiagReqV2Size)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], unix.SOCK_DIAG_BY_FAMILY)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1) // sequence
	r := req[unix.SizeofNlMsghdr:]
	r[0], r[1] = family, unix.IPPROTO_TCP
	ne.PutUint32(r[4:], 1<<tcpListen)
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("send: %w", err)
	}
	var out []dumped
	buf := make([]byte, sockDiagRecvBuffer)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("parse: %w", err)
		}
		for _, m := range msgs {
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if code := int32(ne.Uint32(m.Data)); code != 0 {
						return nil, unix.Errno(-code)
					}
				}
				return out, nil
			case unix.SOCK_DIAG_BY_FAMILY:
				if d, ok := parseDiagMsg(m.Data); ok {
					out = append(out, d)
				}
			}
		}
	}
}

// parseDiagMsg decodes a struct inet_diag_msg and its attributes.
func parseDiagMsg(b []byte) (dumped, bool) {
	if len(b) < inetDiagMsgSize || b[1] != tcpListen {
		return dumped{}, false
	}
	ne := binary.NativeEndian
	d := dumped{
		socket: socket{
			Family: uint16(b[0]),
			Port:   binary.BigEndian.Uint16(b[4:]),
			Cookie: uint64(ne.Uint32(b[44:])) | uint64(ne.Uint32(b[48:]))<<32,
		},
		inode: ne.Uint32(b[68:]),
	}
	for a := b[inetDiagMsgSize:]; len(a) >= 4; {
		l, typ := int(ne.Uint16(a)), ne.Uint16(a[2:])
		if l < 4 || l > len(a) {
			break
		}
		if typ == inetDiagCgroupID && l >= 12 {
			d.cgroup, d.hasCgroup = ne.Uint64(a[4:]), true
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	return d, true
}

// listenersIn dumps the listeners of the cgroup2 directory dir and the
// cgroups below it: in each network namespace its processes are in, the
// sockets whose cgroup is one of them, or, where the kernel does not say
// (before 5.7) or byInode is set, the sockets its processes hold.
func listenersIn(dir string, byInode bool, dump func(nsPath string, nsIno uint64) ([]dumped, error)) ([]socket, error) {
	ids, err := cgroupIDs(dir)
	if err != nil {
		return nil, fmt.Errorf("cgroup ids below %s: %w", dir, err)
	}
	pids, err := cgroupPids(dir)
	if err != nil {
		return nil, fmt.Errorf("processes of %s: %w", dir, err)
	}
	byNS := map[uint64][]int{} // netns inode → pids
	for _, pid := range pids {
		var st unix.Stat_t
		if unix.Stat(nsPath(pid), &st) == nil {
			byNS[st.Ino] = append(byNS[st.Ino], pid)
		}
	}
	var out []socket
	for ino, nsPids := range byNS {
		var got []dumped
		var err error
		for _, pid := range nsPids { // the first that has not exited
			if got, err = dump(nsPath(pid), ino); !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOENT) {
				break
			}
		}
		if err != nil {
			return nil, err
		}
		var held map[uint32]bool
		for _, d := range got {
			if d.hasCgroup && !byInode {
				if ids[d.cgroup] {
					out = append(out, d.socket)
				}
				continue
			}
			if held == nil {
				held = socketInodes(nsPids)
			}
			if held[d.inode] {
				out = append(out, d.socket)
			}
		}
	}
	return out, nil
}

func nsPath(pid int) string { return "/proc/" + strconv.Itoa(pid) + "/ns/net" }

// socketInodes are the inodes of the sockets the processes hold open.
func socketInodes(pids []int) map[uint32]bool {
	held := map[uint32]bool{}
	for _, pid := range pids {
		fdDir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		entries, err := os.ReadDir(fdDir)
		if err != nil {
			continue // exited
		}
		for _, e := range entries {
			link, err := os.Readlink(filepath.Join(fdDir, e.Name()))
			if err != nil || !strings.HasPrefix(link, "socket:[") {
				continue
			}
			if ino, err := strconv.ParseUint(strings.TrimSuffix(link[len("socket:["):], "]"), 10, 32); err == nil {
				held[uint32(ino)] = true
			}
		}
	}
	return held
}
