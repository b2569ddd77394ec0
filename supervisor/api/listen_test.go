package api

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
)

// A second server on a socket path in use fails without touching the
// first one's socket.
func TestListenRefusesASocketInUse(t *testing.T) {
	c := serve(t, newFake())
	sock := c.socket
	before, _ := os.Lstat(sock)
	s2 := &Server{Backend: newFake()}
	err := s2.Listen(sock)
	if err == nil || !strings.Contains(err.Error(), "in use by another podvisor") || !strings.Contains(err.Error(), sock) {
		t.Fatalf("second Listen: %v", err)
	}
	after, err := os.Lstat(sock)
	if err != nil || !os.SameFile(before, after) {
		t.Fatalf("the first socket was replaced or removed: %v", err)
	}
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatalf("the first server stopped answering: %v", err)
	}
}

func TestListenReplacesOnlyStaleSockets(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "not-a-socket")
	os.WriteFile(file, []byte("keep"), 0o644)
	err := (&Server{Backend: newFake()}).Listen(file)
	if err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("Listen over a regular file: %v", err)
	}
	if data, _ := os.ReadFile(file); string(data) != "keep" {
		t.Fatal("a regular file at the socket path was replaced")
	}
}

// A deleted socket, or its deleted directory, comes back with its mode.
func TestDeletedSocketIsRecreated(t *testing.T) {
	parent := t.TempDir()
	sock := filepath.Join(parent, "run", "api.sock")
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Backend: newFake(), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if err := s.Listen(sock); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, sock) }()
	t.Cleanup(func() { cancel(); <-done })
	c := NewClient(sock)
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Add(filepath.Dir(sock))
	os.Remove(sock)
	waitEvent(t, w, sock, fsnotify.Create) // renamed into place, listening
	if _, err := c.Version(context.Background()); err != nil {
		t.Fatalf("re-created socket: %v", err)
	}
	if st, err := os.Lstat(sock); err != nil || st.Mode().Perm() != SocketMode {
		t.Fatalf("re-created socket mode: %v, %v", st.Mode(), err)
	}
	// The whole directory goes (moved away at once, then deleted): it
	// comes back too.
	w.Add(parent)
	if err := os.Rename(filepath.Dir(sock), filepath.Join(parent, "old")); err != nil {
		t.Fatal(err)
	}
	os.RemoveAll(filepath.Join(parent, "old"))
	waitEvent(t, w, filepath.Dir(sock), fsnotify.Create)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := c.Version(context.Background()); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the socket was not re-created in its re-created directory within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitEvent(t *testing.T, w *fsnotify.Watcher, path string, op fsnotify.Op) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.Events:
			if ev.Name == path && ev.Has(op) {
				return
			}
		case <-timeout:
			t.Fatalf("%s was not re-created (no %v event) within 10s", path, op)
		}
	}
}

// The socket never appears with the umask's mode: whoever could connect
// in that moment would hold an API connection with root's powers.
func TestSocketAppearsWithItsMode(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	w.Add(dir)
	old := syscall.Umask(0)
	s := &Server{Backend: newFake()}
	err = s.Listen(sock)
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	defer s.sock.close()
	for {
		select {
		case ev := <-w.Events:
			if ev.Name != sock || !ev.Has(fsnotify.Create) {
				continue
			}
			if st, err := os.Lstat(sock); err != nil || st.Mode().Perm() != SocketMode {
				t.Fatalf("the socket appeared as %v (%v), want %v", st.Mode(), err, os.FileMode(SocketMode))
			}
			return
		case <-time.After(10 * time.Second):
			t.Fatal("no Create event for the socket within 10s")
		}
	}
}
