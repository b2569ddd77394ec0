package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/podvisor/podvisor/supervisor/runtime/pidfd"
	"github.com/podvisor/podvisor/test/prereq"
)

// A child nobody waits for (as one a previous program in this process
// started) is reaped once it exits: it does not stay a zombie.
func TestReapInheritedChild(t *testing.T) {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	cmd.Process.Release() // forgotten, as across an exec: still our child
	if !slices.Contains(childrenOf(os.Getpid()), pid) {
		t.Fatalf("childrenOf(%d) = %v, want %d among them", os.Getpid(), childrenOf(os.Getpid()), pid)
	}
	start, err := pidfd.StartTime(pid)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := pidfd.Open(pid, start)
	if err != nil {
		prereq.Missing(t, "pidfd_open: %v", err)
	}
	done := make(chan struct{})
	go func() { reapWhenExited(pid, fd); close(done) }()
	syscall.Kill(pid, syscall.SIGKILL)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("child %d not reaped within 10 s of its SIGKILL", pid)
	}
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Fatalf("child %d is still in /proc (a zombie) once reaped", pid)
	}
}
