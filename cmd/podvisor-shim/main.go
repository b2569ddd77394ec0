// Command podvisor-shim supervises container processes for the podvisor
// daemon: "podvisor-shim --keeper DIR" runs every process container of a
// data directory (see shim.RunKeeper); "podvisor-shim DIR" runs one (the
// systemd cgroup driver still needs it). The daemon starts it, never by
// hand. It is a
// separate binary because it outlives the daemon: without the daemon's
// dependencies it starts faster and holds less memory. It is also the log
// driver of containerd pods (see shim.RunLogger), and the init that holds a
// pod's shared PID namespace ("podvisor-shim --pod-init", see
// shim.RunPodInit).
package main

import (
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/podvisor/podvisor/supervisor/runtime/process/shim"
)

func main() {
	if shim.IsLogger(os.Args[1:]) {
		runtime.GOMAXPROCS(1)
		os.Exit(shim.RunLogger(os.Args[1:]))
	}
	if shim.IsExecEnv(os.Args[1:]) {
		os.Exit(shim.RunExecEnv(os.Args[1:]))
	}
	if len(os.Args) == 2 && os.Args[1] == shim.PodInitFlag {
		runtime.GOMAXPROCS(1)
		os.Exit(shim.RunPodInit())
	}
	if len(os.Args) == 3 && os.Args[1] == shim.KeeperFlag {
		// Copying logs and reaping need little CPU: one P is the
		// smallest runtime (docs/footprint.md).
		if os.Getenv("GOMAXPROCS") == "" {
			runtime.GOMAXPROCS(1)
		}
		if os.Getenv("GOGC") == "" {
			// Go's smallest heap goal is 4 MiB at GOGC=100: the keeper's
			// live heap is well under it, so garbage would fill it.
			debug.SetGCPercent(25)
		}
		os.Exit(shim.RunKeeper(os.Args[2]))
	}
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: podvisor-shim DIR (started by the podvisor daemon)")
		os.Exit(2)
	}
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1) // a shim copies output and waits: one P is plenty
	}
	os.Exit(shim.Run(os.Args[1]))
}
