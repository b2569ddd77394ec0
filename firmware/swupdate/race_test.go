package swupdate

import (
	"bufio"
	"context"
	"fmt"
	"github.com/podvisor/podvisor/test/prereq"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/firmware"
)

// acceptSyscalls are accept and accept4 per architecture, as
// /proc/PID/task/TID/syscall shows them.
var acceptSyscalls = map[string][2]int{"amd64": {43, 288}, "arm64": {202, 242}}

// acceptingThread is the thread of pid blocked in accept() on the
// listening socket bound to a path ending in name.
func acceptingThread(pid int, name string) (int, error) {
	nrs, ok := acceptSyscalls[runtime.GOARCH]
	if !ok {
		return 0, fmt.Errorf("accept's syscall number on %s is not known here", runtime.GOARCH)
	}
	inode, err := unixSocketInode(name)
	if err != nil {
		return 0, err
	}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0, err
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/syscall", pid, task.Name()))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		nr, _ := strconv.Atoi(f[0])
		fd, _ := strconv.ParseInt(strings.TrimPrefix(f[1], "0x"), 16, 32)
		if nr != nrs[0] && nr != nrs[1] {
			continue
		}
		if link, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); link == "socket:["+inode+"]" {
			return strconv.Atoi(task.Name())
		}
	}
	return 0, fmt.Errorf("no thread of %d is in accept() on %s", pid, name)
}

// unixSocketInode is the inode of the unix socket bound to a path ending
// in name (/proc/net/unix: Num RefCount Protocol Flags Type St Inode Path).
func unixSocketInode(name string) (string, error) {
	f, err := os.Open("/proc/net/unix")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) == 8 && strings.HasSuffix(fields[7], "/"+name) {
			return fields[6], nil
		}
	}
	return "", fmt.Errorf("no unix socket %s in /proc/net/unix", name)
}

// starveProgress makes SWUpdate's progress thread late to accept a
// connection, as on a busy machine: until the test ends it is SCHED_IDLE
// and shares CPU 0 with a thread that spins. The installer's threads keep
// the other CPUs.
func (d *device) starveProgress() {
	d.t.Helper()
	if runtime.NumCPU() < 2 {
		prereq.Missing(d.t, "starving one thread of SWUpdate needs a second CPU for the others")
	}
	// The thread is in accept() once the socket is there; it may take a
	// moment after the control socket answered.
	var tid int
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		if tid, err = acceptingThread(d.swupdate.Process.Pid, "swupdateprog"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("timed out after 10s waiting for SWUpdate's progress thread in accept(): %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	var cpu0 unix.CPUSet
	cpu0.Set(0)
	must(d.t, unix.SchedSetaffinity(tid, &cpu0))
	must(d.t, unix.SchedSetAttr(tid, &unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: unix.SCHED_IDLE}, 0))
	var stop atomic.Bool
	stopped := make(chan struct{})
	ready := make(chan error, 1)
	go func() {
		defer close(stopped)
		// The thread exits with the goroutine (no UnlockOSThread): its
		// affinity goes with it.
		runtime.LockOSThread()
		ready <- unix.SchedSetaffinity(0, &cpu0)
		for !stop.Load() { // spin: CPU 0 is busy
		}
	}()
	must(d.t, <-ready)
	d.t.Cleanup(func() { stop.Store(true); <-stopped })
}

// The race that hung CI: SWUpdate's progress thread accept()s on its own
// and sends no greeting, so the driver's progress connection may be
// registered after a .swu that is not one already failed, its FAILURE
// message sent to no one. With that thread starved the race is the rule;
// every install must still end, failed, with SWUpdate's reason.
func TestSWUpdateMissedProgress(t *testing.T) {
	d := newDevice(t)
	d.starveProgress()
	garbage := d.notSWU()
	const n = 8
	missed := 0
	for i := 0; i < n; i++ {
		ctx, cancel := context.WithTimeout(d.ctx(), time.Minute)
		heard := false
		err := d.driver.Install(ctx, garbage, func(firmware.Progress) { heard = true })
		timedOut := ctx.Err() != nil
		cancel()
		if err == nil || !strings.Contains(err.Error(), "failed") || timedOut {
			t.Fatalf("install %d: %v, want it failed (SWUpdate's reason)", i, err)
		}
		if !heard {
			missed++
		}
	}
	t.Logf("the progress socket missed the end of %d of %d installs", missed, n)
	if data, err := os.ReadFile(filepath.Join(d.dir, "swupdate.log")); err == nil && strings.Count(string(data), "Image invalid or corrupted") < n {
		t.Errorf("SWUpdate's log shows fewer than %d failed installs", n)
	}
}
