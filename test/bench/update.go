package main

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/simfleet"
)

// The fleet self-update benchmark's knobs.
var (
	updateDevices = flag.Int("update-devices", 0, "simulated devices for the fleet self-update measurement (0: skip)")
	updateOnly    = flag.Bool("update-only", false, "measure only the fleet self-update with -update-devices simulated devices")
)

// updateMaxUnavailable is the update's wave, a percentage of the devices.
const updateMaxUnavailable = 10

// updateMember is one device of the self-update benchmark. The simulated
// ones are simfleet's UpdateDevice; a real podvisor daemon, enrolled with
// the same hub, is another kind of member (its Running from the hub's
// view, its Received from its download directory), added to the list
// updateFleet makes.
type updateMember interface {
	ID() string
	Arch() string // the architecture whose artifacts the release must carry
	Start() error
	Stop()
	Running() string
	Received() int64
}

// simMember is a simulated device.
type simMember struct {
	*simfleet.UpdateDevice
	arch string
}

func (s simMember) ID() string      { return s.UpdateDevice.ID }
func (s simMember) Arch() string    { return s.arch }
func (s simMember) Received() int64 { return s.UpdateDevice.Received.Load() }

// busyCount is the most devices updating at once, as they report it.
type busyCount struct {
	mu         sync.Mutex
	busy, peak int
}

func (b *busyCount) set(_ string, busy bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if busy {
		b.busy++
		b.peak = max(b.peak, b.busy)
	} else {
		b.busy--
	}
}

// updateFleet enrols n simulated devices (label bench=update) running
// v1.0.0 and returns them as members.
func updateFleet(ph *podhubServe, n int, busy *busyCount) ([]updateMember, error) {
	enrolled, err := simfleet.LoadEnrolment(ph.data, ph.addr)
	if err != nil {
		return nil, err
	}
	var out []updateMember
	for i := range n {
		id := fmt.Sprintf("upd-%05d", i)
		if err := ph.client.Do("PUT", "/v1/devices/"+id+"/labels", map[string]string{"bench": "update"}, nil); err != nil {
			return nil, err
		}
		creds, err := enrolled.Issue(id)
		if err != nil {
			return nil, err
		}
		d := creds.UpdateDevice(simfleet.UpdateConfig{Arch: runtime.GOARCH, Version: updateFrom, Heartbeat: 30 * time.Second,
			Window: 8, Busy: busy.set, Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
		out = append(out, simMember{d, runtime.GOARCH})
	}
	return out, nil
}

// updateBench rolls a release of the podvisor binaries beside bin out
// to n simulated devices in waves of 10 %. Each device really moves its
// architecture's artifacts through the broker in chunks and checks them.
// It measures the wall time from podhub update until the update is
// Complete, the bytes each device received, podhub's CPU and memory
// over the update, and the most devices updating at once.
func updateBench(bin string, n int) error {
	if n <= 0 {
		return nil
	}
	ph, tmp, podhub, done, err := fleetHub(bin, "podvisor-updatebench")
	if err != nil {
		return err
	}
	defer done()
	busy := &busyCount{}
	members, err := updateFleet(ph, n, busy)
	if err != nil {
		return err
	}
	// The release: the binaries beside bin, and those of each other
	// architecture the members have under bin/<arch>; with a real device,
	// this tree built twice, stamped as the device's packaged binaries
	// and as the release it is updated to.
	from := filepath.Dir(bin)
	var real *realMember
	if *updateReal {
		from = filepath.Join(tmp, "release-"+updateTo)
		packaged := filepath.Join(tmp, "real", "usr-bin")
		if err := buildStamped(packaged, updateFrom); err != nil {
			return err
		}
		if err := buildStamped(from, updateTo); err != nil {
			return err
		}
		real = newRealMember(ph, podhub, filepath.Join(tmp, "real"), filepath.Join(packaged, "podvisor"), *updateRealPods)
		members = append(members, real)
	}
	fmt.Printf("\nFleet self-update: podhub with %d devices (%d simulated, %d real), waves of %d%%, chunks through the embedded broker\n",
		len(members), n, len(members)-n, updateMaxUnavailable)
	fmt.Printf("  on %s, %d CPUs, Linux %s, load average before %s\n", cpuModel(), runtime.NumCPU(), kernel(), loadAverage())
	for _, m := range members {
		if err := m.Start(); err != nil {
			return err
		}
		defer m.Stop()
	}
	if err := waitReady(ph, len(members)); err != nil {
		return err
	}
	args := []string{"--data-dir", ph.data, "release", "push", "--version", updateTo}
	arches := map[string]bool{}
	for _, m := range members {
		arches[m.Arch()] = true
	}
	for arch := range arches {
		dir := from
		if arch != runtime.GOARCH {
			dir = filepath.Join(filepath.Dir(bin), arch)
		}
		for _, name := range protocol.AgentArtifacts {
			args = append(args, "--file", filepath.Join(dir, name))
		}
	}
	if out, err := exec.Command(podhub, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("podhub release push: %v %s", err, out)
	}
	cpu0, _ := cpuTicks(ph.pid())
	start := time.Now()
	if out, err := exec.Command(podhub, "--data-dir", ph.data, "update", "--version", updateTo, "--selector", "bench=update",
		"--max-unavailable", fmt.Sprintf("%d%%", updateMaxUnavailable)).CombinedOutput(); err != nil {
		return fmt.Errorf("podhub update: %v %s", err, out)
	}
	var u api.UpdateInfo
	for deadline := time.Now().Add(30 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		err := ph.client.Do("GET", "/v1/updates/podvisor-"+updateTo, nil, &u)
		if err == nil && (u.Status.Phase == "Complete" || u.Status.Phase == "Halted") {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 30 min the update is %s: %d of %d done (%v)", u.Status.Phase, u.Status.Done, u.Status.Targets, err)
		}
	}
	wall := time.Since(start)
	cpu1, _ := cpuTicks(ph.pid())
	mem := rss(ph.pid())
	peakRSS := procMiB(fmt.Sprintf("/proc/%d/status", ph.pid()))["VmHWM:"]
	if u.Status.Phase != "Complete" || u.Status.Failed > 0 {
		return fmt.Errorf("the update ended %s: %s", u.Status.Phase, u.Status.Reason)
	}
	var total, least, most int64
	for i, m := range members {
		r := m.Received()
		total += r
		if m != updateMember(real) {
			if i == 0 || r < least {
				least = r
			}
			most = max(most, r)
		}
		if v := m.Running(); v != updateTo {
			return fmt.Errorf("%s runs %s after the update", m.ID(), v)
		}
	}
	budget := max(1, len(members)*updateMaxUnavailable/100)
	fmt.Printf("  podhub update -> every device Committed on %s      %8.2f s\n", updateTo, wall.Seconds())
	fmt.Printf("  bytes received per simulated device (least / most)     %6.1f / %.1f MiB\n", float64(least)/(1<<20), float64(most)/(1<<20))
	fmt.Printf("  bytes through the broker in all                        %8.1f MiB\n", float64(total)/(1<<20))
	fmt.Printf("  podhub CPU over the update                             %8.2f s\n", float64(cpu1-cpu0)/clockTicks)
	fmt.Printf("  podhub RSS after / peak                                %6.1f / %.1f MiB\n", mem.total, peakRSS)
	fmt.Printf("  most devices updating at once                          %8d    (max-unavailable %d)\n", busy.peak, budget)
	if busy.peak > budget {
		return fmt.Errorf("%d devices updated at once, over max-unavailable %d", busy.peak, budget)
	}
	if real != nil {
		if err := realReport(real, wireSize(ph, updateTo, real.Arch())); err != nil {
			return err
		}
	}
	fmt.Println("  (no peer in this run: none of the anchors updates itself on this machine, nor a fleet of it)")
	return nil
}

// wireSize is what a device of arch moves for a release: its artifacts'
// transfer sizes.
func wireSize(ph *podhubServe, version, arch string) int64 {
	var r api.ReleaseInfo
	if err := ph.client.Do("GET", "/v1/releases/podvisor/"+version, nil, &r); err != nil {
		return 0
	}
	var n int64
	for _, a := range r.Artifacts {
		if a.Arch == arch {
			_, size := a.Transfer()
			n += size
		}
	}
	return n
}

// loadAverage is the machine's load over the last minute.
func loadAverage() string {
	data, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// waitReady waits until the hub shows n devices Ready.
func waitReady(ph *podhubServe, n int) error {
	var ds []struct{ Ready bool }
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		err := ph.client.Do("GET", "/v1/devices", nil, &ds)
		ready := 0
		for _, d := range ds {
			if d.Ready {
				ready++
			}
		}
		if err == nil && ready >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d devices Ready in 5 min (%v); podhub's log ends:\n%s", ready, n, err, lastLines(ph.log.String(), 30))
		}
	}
}
