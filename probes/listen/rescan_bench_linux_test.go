package listen

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// BenchmarkRescan is the CPU one sock_diag dump of a pod with a listener
// costs: what the dump schedule (NextDump) is chosen from.
func BenchmarkRescan(b *testing.B) {
	if os.Geteuid() != 0 {
		prerequisite(b, "needs root")
	}
	h, err := FindHierarchy()
	if err != nil {
		prerequisite(b, "cgroup2: %v", err)
	}
	w, err := Open(Options{Paths: []Path{PathSockDiag}})
	if err != nil {
		prerequisite(b, "the sock_diag listen watcher: %v", err)
	}
	defer w.Close()
	rel := fmt.Sprintf("podvisor-listen-bench-%d", os.Getpid())
	dir, _ := h.Dir(rel)
	if err := os.Mkdir(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	defer h.Remove(rel)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=server")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Cloneflags: syscall.CLONE_NEWNET}
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := h.Place(rel, cmd.Process.Pid); err != nil {
		b.Fatal(err)
	}
	fmt.Fprintln(in, "listen tcp :0")
	bufio.NewScanner(out).Scan()
	id, err := w.Watch(dir)
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for range w.Events() {
		}
	}()
	b.ResetTimer()
	for b.Loop() {
		if err := w.Rescan(id); err != nil {
			b.Fatal(err)
		}
	}
}
