package shim

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A data directory whose socket path is too long for sun_path (108 bytes)
// is still served and reached (through /proc/self/fd), and the socket is
// made 0600 and refused to anyone but its owner's peers.
func TestKeeperSocketInALongDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	k := &keeper{socket: KeeperSocket(dir, "0123456789abcdef"), quit: make(chan struct{})}
	if len(k.socket) < 108 {
		t.Fatalf("path too short for the test: %d", len(k.socket))
	}
	ln, err := k.listen()
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	st, err := os.Lstat(k.socket)
	if err != nil || st.Mode().Perm() != 0o600 || st.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %v: %v", st, err)
	}
	go func() {
		c, err := ln.AcceptUnix()
		if err == nil {
			c.Close()
		}
	}()
	c, cred, err := DialKeeper(k.socket)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	if int(cred.Pid) != os.Getpid() {
		t.Fatalf("peer pid %d", cred.Pid)
	}
	os.Chmod(k.socket, 0o666)
	if c, _, err := DialKeeper(k.socket); err == nil {
		c.Close()
		t.Fatal("a socket others may write to was trusted")
	}
}
