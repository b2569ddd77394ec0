// Package pressure observes the device's eviction signals and wakes the
// daemon when they may have crossed a threshold: at once through the
// kernel (a cgroup v1 memory threshold eventfd, a PSI trigger), and
// through a slow periodic check as a safety net.
package pressure

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/podvisor/podvisor/supervisor/eviction"
)

// Observer reads the eviction signals.
type Observer struct {
	// MemoryCgroup is the v1 root memory cgroup ("" on cgroup v2): memory
	// is then measured as the kubelet does, capacity minus the root's
	// working set. Without it, the kernel's MemAvailable is used.
	MemoryCgroup string
	// FsPath is a path on the node file system (the data directory).
	FsPath string
	// ImageFsPath is a path on the file system containerd keeps images
	// on ("": no images).
	ImageFsPath string
}

// Observe reads every signal it can.
func (o Observer) Observe() map[eviction.Signal]eviction.Observation {
	obs := map[eviction.Signal]eviction.Observation{}
	if m, err := o.memory(); err == nil {
		obs[eviction.MemoryAvailable] = m
	}
	var st unix.Statfs_t
	if o.FsPath != "" && unix.Statfs(o.FsPath, &st) == nil {
		obs[eviction.NodeFsAvailable] = eviction.Observation{Available: int64(st.Bavail) * int64(st.Bsize), Capacity: int64(st.Blocks) * int64(st.Bsize)}
		obs[eviction.NodeFsInodesFree] = eviction.Observation{Available: int64(st.Ffree), Capacity: int64(st.Files)}
	}
	if o.ImageFsPath != "" && unix.Statfs(o.ImageFsPath, &st) == nil {
		obs[eviction.ImageFsAvailable] = eviction.Observation{Available: int64(st.Bavail) * int64(st.Bsize), Capacity: int64(st.Blocks) * int64(st.Bsize)}
		obs[eviction.ImageFsInodesFree] = eviction.Observation{Available: int64(st.Ffree), Capacity: int64(st.Files)}
	}
	if p, err := pids(); err == nil {
		obs[eviction.PIDAvailable] = p
	}
	return obs
}

func (o Observer) memory() (eviction.Observation, error) {
	info, err := meminfo()
	if err != nil {
		return eviction.Observation{}, err
	}
	total := info["MemTotal"]
	if o.MemoryCgroup == "" {
		return eviction.Observation{Available: info["MemAvailable"], Capacity: total}, nil
	}
	usage, inactive, err := RootUsage(o.MemoryCgroup)
	if err != nil {
		return eviction.Observation{}, err
	}
	return eviction.Observation{Available: total - (usage - inactive), Capacity: total}, nil
}

// RootUsage reads the v1 root memory cgroup's usage and inactive file
// pages.
func RootUsage(cg string) (usage, inactive int64, err error) {
	data, err := os.ReadFile(filepath.Join(cg, "memory.usage_in_bytes"))
	if err != nil {
		return 0, 0, err
	}
	usage, err = strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return 0, 0, err
	}
	f, err := os.Open(filepath.Join(cg, "memory.stat"))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "total_inactive_file "); ok {
			inactive, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	return usage, inactive, s.Err()
}

// MemTotal is the device's memory in bytes (0 if unknown).
func MemTotal() int64 {
	info, err := meminfo()
	if err != nil {
		return 0
	}
	return info["MemTotal"]
}

func meminfo() (map[string]int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	s := bufio.NewScanner(f)
	for s.Scan() {
		name, rest, ok := strings.Cut(s.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, _ := strconv.ParseInt(fields[0], 10, 64)
		if len(fields) > 1 && fields[1] == "kB" {
			v <<= 10
		}
		out[name] = v
	}
	return out, s.Err()
}

// pids is pid.available: the kernel's pid_max less the tasks running.
func pids() (eviction.Observation, error) {
	data, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return eviction.Observation{}, err
	}
	max, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		return eviction.Observation{}, err
	}
	load, err := os.ReadFile("/proc/loadavg") // "0.00 0.01 0.05 1/123 4567"
	if err != nil {
		return eviction.Observation{}, err
	}
	fields := strings.Fields(string(load))
	if len(fields) < 4 {
		return eviction.Observation{}, errors.New("/proc/loadavg: malformed")
	}
	_, total, _ := strings.Cut(fields[3], "/")
	running, err := strconv.ParseInt(total, 10, 64)
	if err != nil {
		return eviction.Observation{}, err
	}
	return eviction.Observation{Available: max - running, Capacity: max}, nil
}

// Notifier sends on C whenever the signals should be looked at again;
// Take then says why.
type Notifier struct {
	C       chan struct{}
	log     *slog.Logger
	pending atomic.Uint32 // the Wake bits not taken yet
}

// NewNotifier returns a notifier; call its sources' Start methods.
func NewNotifier(log *slog.Logger) *Notifier {
	return &Notifier{C: make(chan struct{}, 1), log: log}
}

// Poke records why the signals should be looked at and wakes the reader
// of C.
func (n *Notifier) Poke(why Wake) {
	n.pending.Or(uint32(why))
	select {
	case n.C <- struct{}{}:
	default: // one pending wake-up is enough: its causes add up
	}
}

// Take returns every cause poked since the last Take and clears them. Call
// it after each receive from C: 0 means an earlier Take already had them.
func (n *Notifier) Take() Wake { return Wake(n.pending.Swap(0)) }

// Every pokes on a slow period: the safety net behind the kernel events.
func (n *Notifier) Every(ctx context.Context, d time.Duration) {
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				n.Poke(WakePeriodic)
			}
		}
	}()
}

// PSI pokes when tasks stall on memory for stall within every window, by
// PSI triggers on each file: /proc/pressure/memory for the whole system, a
// cgroup v2 memory.pressure for the pods alone. The poll for POLLPRI needs
// a thread of its own, since Go's poller does not wait for priority
// events; it sleeps in the kernel until a trigger fires or ctx ends (an
// eventfd in the same poll set), never on a timer.
func (n *Notifier) PSI(ctx context.Context, stall, window time.Duration, files ...string) error {
	stop, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return err
	}
	fds := []unix.PollFd{{Fd: int32(stop), Events: unix.POLLIN}}
	closeAll := func() {
		for _, f := range fds {
			unix.Close(int(f.Fd))
		}
	}
	trigger := fmt.Sprintf("some %d %d", stall.Microseconds(), window.Microseconds())
	for _, file := range files {
		fd, err := unix.Open(file, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return fmt.Errorf("PSI: %w", err)
		}
		fds = append(fds, unix.PollFd{Fd: int32(fd), Events: unix.POLLPRI})
		// With its NUL: the kernel overwrites the buffer's last byte with
		// one, which would otherwise cut the window's last digit.
		if _, err := unix.Write(fd, append([]byte(trigger), 0)); err != nil {
			closeAll()
			return fmt.Errorf("PSI trigger %q on %s: %w", trigger, file, err)
		}
	}
	go func() {
		<-ctx.Done()
		unix.Write(stop, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	}()
	go func() {
		defer closeAll()
		for {
			if _, err := unix.Poll(fds, -1); err != nil {
				if errors.Is(err, unix.EINTR) {
					continue
				}
				n.log.Warn("PSI trigger stopped", "err", err)
				return
			}
			if fds[0].Revents != 0 {
				return
			}
			for i := 1; i < len(fds); i++ {
				switch {
				case fds[i].Revents&unix.POLLERR != 0:
					n.log.Warn("PSI trigger source gone", "file", files[i-1])
					fds[i].Events, fds[i].Fd = 0, -1 // poll ignores a negative fd
				case fds[i].Revents&unix.POLLPRI != 0:
					n.Poke(WakePSI)
				}
			}
		}
	}()
	return nil
}

// Modified pokes (WakeMemoryEvents) whenever the kernel notifies a change
// of file, a cgroup v2 memory.events (a cgroup hit its memory.high or
// memory.max, or the OOM killer ran in it), through inotify.
func (n *Notifier) Modified(ctx context.Context, file string) error {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return err
	}
	if _, err := unix.InotifyAddWatch(fd, file, unix.IN_MODIFY); err != nil {
		unix.Close(fd)
		return fmt.Errorf("watching %s: %w", file, err)
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: read through Go's poller
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				return // closed
			}
			n.Poke(WakeMemoryEvents)
		}
	}()
	return nil
}

// MemoryThreshold pokes the moment the v1 memory cgroup's usage crosses
// level, in either direction (cgroup.event_control with an eventfd, as the
// kubelet's memcg notifier does). Calling it again moves the threshold.
type MemoryThreshold struct {
	n      *Notifier
	cg     string
	cancel context.CancelFunc
}

// NewMemoryThreshold watches the v1 memory cgroup at cg.
func (n *Notifier) NewMemoryThreshold(cg string) *MemoryThreshold {
	return &MemoryThreshold{n: n, cg: cg}
}

// Set arms the threshold at usage level bytes, replacing the previous one.
func (t *MemoryThreshold) Set(ctx context.Context, level int64) error {
	if t.cancel != nil {
		t.cancel()
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return err
	}
	usage, err := os.Open(filepath.Join(t.cg, "memory.usage_in_bytes"))
	if err != nil {
		unix.Close(efd)
		return err
	}
	defer usage.Close()
	ctl := fmt.Sprintf("%d %d %d", efd, usage.Fd(), level)
	if err := os.WriteFile(filepath.Join(t.cg, "cgroup.event_control"), []byte(ctl), 0); err != nil {
		unix.Close(efd)
		return fmt.Errorf("memory threshold: %w", err)
	}
	f := os.NewFile(uintptr(efd), "memory-threshold") // in Go's poller: no thread waits
	ctx, t.cancel = context.WithCancel(ctx)
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		buf := make([]byte, 8)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			t.n.Poke(WakeThreshold)
		}
	}()
	return nil
}
