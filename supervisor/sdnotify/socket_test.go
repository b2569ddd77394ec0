package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// The environment says whether there is a service manager and whether it
// watches this process.
func TestFromEnv(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "30000000")
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))
	if s, err := FromEnv(); s != nil || err != nil {
		t.Fatalf("without NOTIFY_SOCKET: %+v, %v; want none", s, err)
	}

	dir, err := os.MkdirTemp("", "sdnotify")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv("NOTIFY_SOCKET", path)
	s, err := FromEnv()
	if err != nil || s == nil || s.Watchdog != 30*time.Second {
		t.Fatalf("FromEnv: %+v, %v; want a socket with a 30s watchdog", s, err)
	}
	if err := s.Send("READY=1\nSTATUS=running 0 pods"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 100)
	conn.SetReadDeadline(time.Now().Add(time.Second))
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1\nSTATUS=running 0 pods" {
		t.Fatalf("received %q, %v", buf[:n], err)
	}

	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()+1)) // a child's
	if s, err := FromEnv(); err != nil || s == nil || s.Watchdog != 0 {
		t.Fatalf("watchdog of another process: %+v, %v; want a socket without watchdog", s, err)
	}
	t.Setenv("WATCHDOG_USEC", "soon")
	if _, err := FromEnv(); err == nil {
		t.Fatal("a WATCHDOG_USEC that is no number was taken")
	}
}
