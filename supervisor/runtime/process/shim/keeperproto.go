package shim

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// KeeperFlag makes podvisor-shim the keeper of a data directory
// ("podvisor-shim --keeper DIR"): one process that runs every process
// container whose instance directory is under DIR (see RunKeeper).
const KeeperFlag = "--keeper"

// Keeper requests (KeeperRequest.Op). Each connection carries one request;
// KeeperWatch keeps it open for events.
const (
	// KeeperStart starts the instance KeeperRequest.Instance; the
	// instance lock, locked, comes with it by SCM_RIGHTS.
	KeeperStart = "start"
	// KeeperSignal sends KeeperRequest.Signal to the instance's leader;
	// KillSignal kills its whole process tree.
	KeeperSignal = "signal"
	// KeeperWatch answers with the live instances, then with one
	// KeeperReply.Exited per instance that ends, once its lock is free.
	KeeperWatch = "watch"
	// KeeperDrain tells an older keeper to take no more starts and to exit
	// when its last container has ended.
	KeeperDrain = "drain"
	// KeeperResume takes a drain back: the daemon of the keeper's own
	// version sends it, as a daemon of another version may have drained
	// it (downgraded and upgraded again) and would otherwise leave no
	// keeper of this version to start through until its containers end.
	// A keeper already exiting refuses it (KeeperRefused).
	KeeperResume = "resume"
)

// InstancesDir holds the instance directories in a keeper's data
// directory; the keeper's socket, lock and log are beside it.
const InstancesDir = "containers"

// KeeperRefused is a keeper's error for a start or watch it refuses
// because it is on its way out: the daemon goes to a new keeper.
const KeeperRefused = "keeper is draining or exiting"

// maxKeeperMessage bounds one request or reply line.
const maxKeeperMessage = 4 << 10

// KeeperRequest is one request to a keeper.
type KeeperRequest struct {
	Op       string `json:"op"`
	Instance string `json:"instance,omitempty"`
	Signal   int    `json:"signal,omitempty"`
}

// KeeperReply is a keeper's answer, or on a watch an event.
type KeeperReply struct {
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
	// Started is the state of a started instance (also in its shim.json).
	Started *State `json:"started,omitempty"`
	// Live answers KeeperWatch: the instances whose lock the keeper holds.
	Live []string `json:"live,omitempty"`
	// Exited names an instance whose exit is recorded and lock released.
	Exited string `json:"exited,omitempty"`
}

// KeeperSocket is where the keeper of a version listens in dir.
func KeeperSocket(dir, version string) string {
	return filepath.Join(dir, "keeper-"+version+".sock")
}

// KeeperVersion names a keeper binary by its content: a rebuilt shim is a
// new version, started beside the old one. FNV-128a tells builds apart;
// nothing trusts it (the socket's owner is checked), and crypto/sha256
// would pull the FIPS module into the shim binary.
func KeeperVersion(exe string) (string, error) {
	f, err := os.Open(exe)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := fnv.New128a()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hashing %s: %w", exe, err)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// ValidInstanceID reports whether id can name an instance directory: one
// path element, nothing a request could use to leave the data directory.
func ValidInstanceID(id string) bool {
	return id != "" && id != "." && id != ".." && len(id) <= 255 && !strings.ContainsAny(id, "/\x00")
}

// sockaddr is a unix socket address for path: a path too long for
// sun_path (108 bytes) is reached through its directory's descriptor.
// The returned func releases that descriptor once bound or connected.
func sockaddr(path string) (string, func(), error) {
	if len(path) < 100 {
		return path, func() {}, nil
	}
	fd, err := unix.Open(filepath.Dir(path), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", nil, err
	}
	return fmt.Sprintf("/proc/self/fd/%d/%s", fd, filepath.Base(path)), func() { unix.Close(fd) }, nil
}

// DialKeeper connects to the keeper socket at path, checking that the
// socket and the process behind it belong to this user (root): a socket
// planted by anyone else is never handed an instance lock.
func DialKeeper(path string) (*net.UnixConn, *unix.Ucred, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return nil, nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK || int(st.Uid) != os.Geteuid() || st.Mode&0o077 != 0 {
		return nil, nil, fmt.Errorf("keeper socket %s: not a socket of uid %d with mode 0600", path, os.Geteuid())
	}
	addr, release, err := sockaddr(path)
	if err != nil {
		return nil, nil, err
	}
	defer release()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: addr, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	cred, err := peerCred(c)
	if err == nil && int(cred.Uid) != os.Geteuid() {
		err = fmt.Errorf("keeper socket %s: served by uid %d", path, cred.Uid)
	}
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, cred, nil
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var credErr error
	if err := rc.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, credErr
}

// SendKeeper writes one request, with fds attached (SCM_RIGHTS) if any.
func SendKeeper(c *net.UnixConn, req KeeperRequest, fds ...int) error {
	data, err := jsonLine(req)
	if err != nil {
		return err
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(data, oob, nil)
	if err == nil && n != len(data) {
		err = io.ErrShortWrite
	}
	return err
}

// recvKeeper reads one request and the descriptors sent with it. They
// arrive close-on-exec (MSG_CMSG_CLOEXEC): none may leak into a container
// forked meanwhile.
func recvKeeper(c *net.UnixConn) (KeeperRequest, []int, error) {
	var req KeeperRequest
	buf, oob := make([]byte, maxKeeperMessage), make([]byte, unix.CmsgSpace(4*4))
	rc, err := c.SyscallConn()
	if err != nil {
		return req, nil, err
	}
	var n, oobn int
	var recvErr error
	err = rc.Read(func(fd uintptr) bool {
		n, oobn, _, _, recvErr = unix.Recvmsg(int(fd), buf, oob, unix.MSG_CMSG_CLOEXEC)
		return recvErr != unix.EAGAIN
	})
	if err == nil {
		err = recvErr
	}
	if err != nil {
		return req, nil, err
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return req, nil, err
		}
		for _, m := range msgs {
			if got, err := unix.ParseUnixRights(&m); err == nil {
				fds = append(fds, got...)
			}
		}
	}
	line := buf[:n]
	if len(line) == 0 || line[len(line)-1] != '\n' {
		closeAll(fds)
		return req, nil, errors.New("keeper request: not one whole line")
	}
	if err := json.Unmarshal(line, &req); err != nil {
		closeAll(fds)
		return req, nil, fmt.Errorf("keeper request: %w", err)
	}
	return req, fds, nil
}

// jsonLine is v as one line of JSON.
func jsonLine(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
