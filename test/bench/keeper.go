package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// keeperPrototype runs test/bench/prototype/keeper, one process that is the
// parent of n sleeping containers (their flocks, logs and exit records),
// and returns its memory: the same-run measure of the design that would
// replace one podvisor-shim per container (docs/footprint.md).
func keeperPrototype(dir string, n int) (group, error) {
	bin := filepath.Join(dir, "keeper")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "github.com/podvisor/podvisor/test/bench/prototype/keeper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return group{}, fmt.Errorf("building the keeper prototype: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-dir", filepath.Join(dir, "keeper-instances"), "-n", fmt.Sprint(n))
	cmd.Env = append(os.Environ(), "GOMAXPROCS=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		return group{}, err
	}
	if err := cmd.Start(); err != nil {
		return group{}, err
	}
	// Its containers die with it (parent-death signal).
	defer func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		return group{}, fmt.Errorf("keeper prototype did not start its %d containers: %q %v", n, line, err)
	}
	return groupOf(fmt.Sprintf("keeper prototype, %d containers", n), []int{cmd.Process.Pid}), nil
}
