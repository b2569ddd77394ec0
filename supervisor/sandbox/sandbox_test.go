package sandbox

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/test/prereq"
)

func requireRoot(t *testing.T) {
	t.Helper()
	prereq.Root(t, "sandboxes need CAP_SYS_ADMIN")
}

// inNamespace runs fn on a thread inside the namespace bound at path.
func inNamespace(t *testing.T, path string, kind int, fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with us
		f, err := os.Open(path)
		if err != nil {
			t.Error(err)
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), kind); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

func TestCreateJoinDialRemove(t *testing.T) {
	requireRoot(t)
	root := t.TempDir()
	s, err := Create(root, "uid-1", "pod-one", Net, IPC, UTS)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Exists(Net, IPC, UTS) {
		t.Fatal("namespaces not bound")
	}
	// Idempotent: a second Create keeps the same namespaces.
	var before, after unix.Stat_t
	unix.Stat(s.Path(Net), &before)
	if _, err := Create(root, "uid-1", "pod-one", Net, IPC, UTS); err != nil {
		t.Fatal(err)
	}
	unix.Stat(s.Path(Net), &after)
	if before.Ino != after.Ino {
		t.Fatal("a second Create replaced the network namespace")
	}

	inNamespace(t, s.Path(UTS), unix.CLONE_NEWUTS, func() {
		var u unix.Utsname
		unix.Uname(&u)
		if got := unix.ByteSliceToString(u.Nodename[:]); got != "pod-one" {
			t.Errorf("hostname %q, want pod-one", got)
		}
	})

	// A listener on the pod's loopback is reachable through DialContext
	// and not from the host's network.
	var ln net.Listener
	inNamespace(t, s.Path(Net), unix.CLONE_NEWNET, func() {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Error(err)
		}
	})
	if ln == nil {
		t.FailNow()
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("hi"))
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := DialContext(ctx, &net.Dialer{}, s.Path(Net), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("dial in the pod's namespace: %v", err)
	}
	buf := make([]byte, 2)
	if _, err := conn.Read(buf); err != nil || string(buf) != "hi" {
		t.Fatalf("read %q, %v", buf, err)
	}
	conn.Close()
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the pod's loopback listener was reachable from the host's network")
	}

	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Fatalf("sandbox directory left: %v", err)
	}
}
