package shim

import (
	"fmt"
	"os"
	"os/signal"

	"golang.org/x/sys/unix"
)

// PodInitFlag makes podvisor-shim the init that holds a pod's shared PID
// namespace (see sandbox.Sandbox.EnsurePID).
const PodInitFlag = "--pod-init"

// RunPodInit is the init of a pod's PID namespace: it reaps the orphans
// reparented to it and exits on SIGTERM or SIGINT. It refuses to run as
// anything but pid 1.
func RunPodInit() int {
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "podvisor-shim "+PodInitFlag+": must be the first process of a new PID namespace (started by the podvisor daemon)")
		return 2
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGCHLD, unix.SIGTERM, unix.SIGINT)
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
		if sig := <-sigs; sig != unix.SIGCHLD {
			return 0
		}
	}
}
