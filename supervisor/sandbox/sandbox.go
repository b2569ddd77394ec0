// Package sandbox makes the namespaces a pod's containers share (network,
// IPC, UTS, and PID for shareProcessNamespace) without a pause container:
// each of the first three is created by a thread that unshares it and is
// kept alive by a bind mount of its nsfs file, under
// <dir>/<pod uid>/. Containers join them by path; the namespaces outlive
// the daemon (a restarted daemon finds them) and die with the device or
// when the pod is gone.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// Kinds of namespace a sandbox holds, as named in /proc/PID/ns.
const (
	Net = "net"
	IPC = "ipc"
	UTS = "uts"
)

// Sandbox is a pod's set of namespaces.
type Sandbox struct {
	Dir string // <root>/<uid>
}

// Path is the file a namespace of the sandbox is bound to.
func (s Sandbox) Path(kind string) string { return filepath.Join(s.Dir, kind) }

// Exists reports whether the sandbox's namespaces are all in place (a
// reboot empties /run, and with it every sandbox).
func (s Sandbox) Exists(kinds ...string) bool {
	for _, k := range kinds {
		if !isNsfs(s.Path(k)) {
			return false
		}
	}
	return true
}

// Create makes the namespaces of the given kinds for a pod, sets the UTS
// namespace's hostname and brings the loopback interface up in the
// network namespace. It is idempotent: namespaces already bound are kept.
func Create(root, uid, hostname string, kinds ...string) (Sandbox, error) {
	s := Sandbox{Dir: filepath.Join(root, uid)}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return s, err
	}
	var flags int
	var want []string
	for _, k := range kinds {
		if isNsfs(s.Path(k)) {
			continue
		}
		switch k {
		case Net:
			flags |= unix.CLONE_NEWNET
		case IPC:
			flags |= unix.CLONE_NEWIPC
		case UTS:
			flags |= unix.CLONE_NEWUTS
		default:
			return s, fmt.Errorf("sandbox: unknown namespace kind %q", k)
		}
		want = append(want, k)
	}
	if len(want) == 0 {
		return s, nil
	}
	errc := make(chan error, 1)
	go func() {
		// The thread is never unlocked: it ends with this goroutine, and
		// its namespaces stay only through their bind mounts.
		runtime.LockOSThread()
		errc <- s.unshareAndBind(flags, want, hostname)
	}()
	if err := <-errc; err != nil {
		s.Remove()
		return s, fmt.Errorf("sandbox for pod %s: %w", uid, err)
	}
	return s, nil
}

func (s Sandbox) unshareAndBind(flags int, kinds []string, hostname string) error {
	if err := unix.Unshare(flags); err != nil {
		return fmt.Errorf("unshare: %w", err)
	}
	if flags&unix.CLONE_NEWUTS != 0 && hostname != "" {
		if err := unix.Sethostname([]byte(hostname)); err != nil {
			return fmt.Errorf("hostname: %w", err)
		}
	}
	if flags&unix.CLONE_NEWNET != 0 {
		if err := loopbackUp(); err != nil {
			return fmt.Errorf("loopback: %w", err)
		}
	}
	tid := unix.Gettid()
	for _, k := range kinds {
		target := s.Path(k)
		f, err := os.OpenFile(target, os.O_CREATE|os.O_RDONLY, 0o444)
		if err != nil {
			return err
		}
		f.Close()
		src := fmt.Sprintf("/proc/self/task/%d/ns/%s", tid, k)
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s namespace: %w", k, err)
		}
	}
	return nil
}

// loopbackUp sets IFF_UP on lo in the calling thread's network namespace:
// the pod's containers talk to each other on localhost.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr)
}

// Remove stops the pod's init, if it has one, unbinds the sandbox's
// namespaces (they end once no process is left in them) and deletes its
// directory.
func (s Sandbox) Remove() error {
	errs := []error{s.stopInit()}
	for _, k := range []string{Net, IPC, UTS, PID} {
		p := s.Path(k)
		if isNsfs(p) {
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
			}
		}
	}
	if err := os.RemoveAll(s.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// isNsfs reports whether path is a bound namespace.
func isNsfs(path string) bool {
	var st unix.Statfs_t
	return unix.Statfs(path, &st) == nil && st.Type == unix.NSFS_MAGIC
}

// DialContext dials from inside the network namespace bound at netns, as
// probes of a pod with its own network do: the socket belongs to the
// namespace it was created in, whatever thread uses it afterwards.
func DialContext(ctx context.Context, d *net.Dialer, netns, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	resc := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		conn, err := dialIn(ctx, d, netns, network, addr)
		resc <- result{conn, err}
	}()
	r := <-resc
	return r.conn, r.err
}

// dialIn runs on a locked thread. If it cannot return the thread to the
// host's namespace it leaves the thread locked, so Go discards it.
func dialIn(ctx context.Context, d *net.Dialer, netns, network, addr string) (net.Conn, error) {
	host, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err
	}
	defer host.Close()
	target, err := os.Open(netns)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("pod network namespace: %w", err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("entering the pod's network namespace: %w", err)
	}
	conn, err := d.DialContext(ctx, network, addr)
	if unix.Setns(int(host.Fd()), unix.CLONE_NEWNET) == nil {
		runtime.UnlockOSThread()
	}
	return conn, err
}
