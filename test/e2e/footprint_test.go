package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/procstat"
)

// Once start-up is over the daemon pages out its own program code: its
// file-backed RSS falls to a fraction of what start-up mapped, and the
// daemon keeps working on the code it faults back in.
func TestDaemonReleasesStartupCode(t *testing.T) {
	var fs unix.Statfs_t
	if err := unix.Statfs(binary, &fs); err != nil {
		t.Fatal(err)
	}
	// uint32: f_type is an int32 on 32-bit ARM and 386, and RAMFS_MAGIC
	// does not fit one.
	if magic := uint32(fs.Type); magic == unix.TMPFS_MAGIC || magic == unix.RAMFS_MAGIC {
		prerequisite(t, "test binaries off tmpfs: on tmpfs the daemon keeps its code (paging it out would write it to swap)")
	}
	d := newDaemon(t)
	d.start()
	pid := d.cmd.Process.Pid
	atStart := rssFileKiB(t, pid)
	pidFile := d.dir + "/before.pid"
	// $$$$: the pod's command expands $$ to $ (Kubernetes' escaping).
	d.write("before.yaml", processPod("before", "Always", 1, "echo $$$$ > "+pidFile+".tmp && mv "+pidFile+".tmp "+pidFile+"; exec sleep 1000"))
	d.waitPod("before", 10*time.Second, running)

	released := waitForValue(t, 15*time.Second, fmt.Sprintf("the daemon's file-backed RSS (%d KiB after start-up) to fall below half", atStart),
		func() int { return rssFileKiB(t, pid) }, func(kib int) bool { return kib < atStart/2 })
	t.Logf("file-backed RSS: %d KiB after start-up, %d KiB once released", atStart, released)

	// The code it needs comes back: a new pod runs, a killed container restarts.
	d.write("after.yaml", processPod("after", "Always", 1, "exec sleep 1000"))
	d.waitPod("after", 10*time.Second, running)
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	container, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		t.Fatalf("%s: %v", pidFile, err)
	}
	if err := unix.Kill(container, unix.SIGKILL); err != nil {
		t.Fatalf("killing the container (pid %d): %v", container, err)
	}
	d.waitPod("before", 10*time.Second, func(p *v1.Pod) bool {
		return running(p) && len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1
	})
}

// rssFileKiB is the RssFile line of /proc/PID/status.
func rssFileKiB(t *testing.T, pid int) int {
	t.Helper()
	kib, err := procstat.KiB(strconv.Itoa(pid), "RssFile")
	if err != nil {
		t.Fatal(err)
	}
	return kib
}
