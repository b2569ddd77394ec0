package main

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/broker"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/store"
	"github.com/podvisor/podvisor/sync/uplink"
	"github.com/podvisor/podvisor/test/simfleet"
)

// quietPods is a simulated device's daemon: it accepts everything.
type quietPods struct{}

func (quietPods) Conflicts([]*v1.Pod) (map[string]string, error) { return nil, nil }
func (quietPods) ApplyAssigned(int64, []*v1.Pod, []string)       {}
func (quietPods) Renew(time.Time)                                {}
func (quietPods) Node() (*v1.Node, error)                        { return &v1.Node{}, nil }

// countingPods is a simulated device's daemon that tells the fleet bench
// when the device has applied a hub document: the agent calls ApplyAssigned
// once the document is stored durably, just before it acknowledges it.
// The bench waits on this instead of querying every device's store.
type countingPods struct {
	quietPods
	once    *sync.Once
	applied *fleetApplies
}

func (countingPods) Renew(time.Time) {}

func (p countingPods) ApplyAssigned(gen int64, _ []*v1.Pod, _ []string) {
	if gen >= 1 {
		p.once.Do(p.applied.one)
	}
}

// fleetApplies counts the devices that applied the bench's document.
type fleetApplies struct {
	remaining atomic.Int64
	all       chan struct{} // closed when none remains
}

func newFleetApplies(n int) *fleetApplies {
	f := &fleetApplies{all: make(chan struct{})}
	f.remaining.Store(int64(n))
	return f
}

func (f *fleetApplies) one() {
	if f.remaining.Add(-1) == 0 {
		close(f.all)
	}
}

var silent = slog.New(slog.NewTextHandler(io.Discard, nil))

func freePort() string {
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	defer l.Close()
	return l.Addr().String()
}

// hubBench measures hub sync: status throughput device → hub through the
// embedded broker and through Mosquitto (the peer, same run), device-side
// fsyncs per 1,000 status changes, and podhub with simulated devices:
// apply to all → all acked, and podhub's RSS.
func hubBench(binDir string, devices int) error {
	dir, err := os.MkdirTemp("", "podvisor-hubbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fmt.Printf("\nhub sync\n")
	embedded := freePort()
	b, err := broker.Start(embedded, silent)
	if err != nil {
		return err
	}
	rate, cpu, err := statusThroughput(filepath.Join(dir, "embedded"), embedded, 10000)
	b.Close()
	if err != nil {
		return err
	}
	fmt.Printf("status updates device -> hub, stored, embedded broker   %8.0f /s  (10,000 distinct pods' statuses, acked by the hub; %.1f µs CPU each: device, broker, hub)\n", rate, float64(cpu)/1e3)
	if peer, ok := startMosquittoPlain(dir); ok {
		prate, pcpu, err := statusThroughput(filepath.Join(dir, "mosquitto"), peer.addr, 10000)
		peer.stop()
		if err != nil {
			return err
		}
		fmt.Printf("  peer: the same through Mosquitto %s                %8.0f /s  (embedded/Mosquitto %.2fx; %.1f µs CPU each: device, hub)\n", peer.version, prate, rate/prate, float64(pcpu)/1e3)
	} else {
		fmt.Println("  peer: Mosquitto not installed (Debian's mosquitto); skipped")
	}
	if n, ok := fsyncsPer1000(dir); ok {
		fmt.Printf("device SQLite fsyncs per 1,000 status changes            %8d    (each change its own transaction; strace -f -c)\n", n)
	} else {
		fmt.Println("device SQLite fsyncs per 1,000 status changes: strace not installed; skipped")
	}
	if devices > 0 {
		return fleetBench(binDir, dir, devices)
	}
	return nil
}

// fleetOnlyBench runs only fleetBench: podhub (next to bin) with the
// simulated devices.
func fleetOnlyBench(bin string, devices int) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	if devices <= 0 {
		return fmt.Errorf("-fleet-only needs -hub-devices > 0")
	}
	dir, err := os.MkdirTemp("", "podvisor-fleetbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	return fleetBench(filepath.Dir(abs), dir, devices)
}

// statusThroughput sends n statuses of distinct pods (no coalescing) and
// times until the hub has acknowledged every one.
func statusThroughput(dir, addr string, n int) (rate float64, cpuPer time.Duration, err error) {
	fleet, err := fleetdb.Open(filepath.Join(dir, "fleet.db"))
	if err != nil {
		return 0, 0, err
	}
	defer fleet.Close()
	if err := fleet.AddDevice("bench-1"); err != nil {
		return 0, 0, err
	}
	fleet.SetRetention(fleetdb.Retention{Events: 1000, Mirrors: n}) // n distinct pods, all kept
	_, priv, _ := ed25519.GenerateKey(nil)
	h := hub.New(hub.Config{Broker: "mqtt://" + addr, Key: priv, ClientID: "podhub-bench"}, fleet, silent)
	if err := h.Start(10 * time.Second); err != nil {
		return 0, 0, err
	}
	defer h.Close()
	st, err := store.Open(filepath.Join(dir, "device.db"), store.Limits{Rows: 2 * n, Bytes: 1 << 30})
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	a, err := uplink.New(uplink.Config{Broker: "mqtt://" + addr, DeviceID: "bench-1", AllowUnsigned: true}, st, quietPods{}, silent)
	if err != nil {
		return 0, 0, err
	}
	stop := make(chan struct{})
	defer close(stop)
	go a.Run(stop)
	// The statuses are encoded before the clock starts: encoding a pod is
	// the daemon's work, not sync's (the device's outbox writes, the
	// broker and the hub are timed).
	all := make([]store.Item, n)
	for i := range all {
		name := fmt.Sprintf("pod-%05d", i)
		p, _ := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Status: v1.PodStatus{Phase: v1.PodRunning}})
		all[i] = store.Item{Key: "default/" + name, Kind: store.KindPod, Payload: p}
	}
	start, cpu0 := time.Now(), processCPU()
	for items := all; len(items) > 0; {
		k := min(100, len(items))
		if err := a.Publish(items[:k]); err != nil {
			return 0, 0, err
		}
		items = items[k:]
	}
	// Progress is polled (cheap); the rows are counted once all is acked.
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(2 * time.Millisecond) {
		acked, assigned, _ := st.Progress()
		if acked == assigned && assigned >= int64(n) {
			if s, _ := st.Stats(); s.Rows == 0 {
				break
			}
		}
		if time.Now().After(deadline) {
			s, _ := st.Stats()
			return 0, 0, fmt.Errorf("status throughput: %d statuses still unacknowledged after 2 min", s.Rows)
		}
	}
	elapsed := time.Since(start)
	cpu := processCPU() - cpu0
	ms, _ := fleet.Mirrors("bench-1")
	if len(ms) != n {
		return 0, 0, fmt.Errorf("status throughput: the hub holds %d mirrors, want %d", len(ms), n)
	}
	return float64(n) / elapsed.Seconds(), cpu / time.Duration(n), nil
}

// gcStats are this process's collections so far and their CPU.
type gcStats struct {
	cycles     uint64
	cpuSeconds float64
}

func readGC() gcStats {
	s := []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return gcStats{s[0].Value.Uint64(), s[1].Value.Float64()}
}

func (g gcStats) since(before gcStats) gcStats {
	return gcStats{g.cycles - before.cycles, g.cpuSeconds - before.cpuSeconds}
}

// processCPU is this process's CPU time (user and system) so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

type mosquittoPeer struct {
	addr, version string
	cmd           *exec.Cmd
}

func (m mosquittoPeer) stop() { m.cmd.Process.Kill(); m.cmd.Wait() }

// startMosquittoPlain runs Debian's Mosquitto on a private loopback port
// with default settings (no TLS), as the broker peer.
func startMosquittoPlain(dir string) (mosquittoPeer, bool) {
	bin := "/usr/sbin/mosquitto"
	if _, err := os.Stat(bin); err != nil {
		return mosquittoPeer{}, false
	}
	addr := freePort()
	_, port, _ := net.SplitHostPort(addr)
	conf := filepath.Join(dir, "mosquitto.conf")
	os.WriteFile(conf, []byte("user root\nlistener "+port+" 127.0.0.1\nallow_anonymous true\nmax_queued_messages 100000\nset_tcp_nodelay true\n"), 0o644)
	out, _ := exec.Command(bin, "-h").CombinedOutput()
	version := strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "mosquitto version ")
	cmd := exec.Command(bin, "-c", conf)
	if err := cmd.Start(); err != nil {
		return mosquittoPeer{}, false
	}
	for i := 0; i < 100; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return mosquittoPeer{addr: addr, version: version, cmd: cmd}, true
		}
		time.Sleep(20 * time.Millisecond)
	}
	cmd.Process.Kill()
	return mosquittoPeer{}, false
}

// fsyncsPer1000 runs this program as a child that makes 1,000 status
// changes in the outbox, one transaction each, under strace.
func fsyncsPer1000(dir string) (int, bool) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		return 0, false
	}
	self, _ := os.Executable()
	cmd := exec.Command(strace, "-f", "-c", "-e", "trace=fsync,fdatasync", self, "-outbox-child", filepath.Join(dir, "fsync.db"))
	var out bytes.Buffer
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return 0, false
	}
	total := 0
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) >= 5 && (f[len(f)-1] == "fsync" || f[len(f)-1] == "fdatasync") {
			var n int
			fmt.Sscan(f[3], &n)
			total += n
		}
	}
	return total, true
}

// outboxChild makes 1,000 status changes of 50 pods, each committed on
// its own, then closes the database (a checkpoint).
func outboxChild(path string) error {
	st, err := store.Open(path, store.DefaultLimits)
	if err != nil {
		return err
	}
	for i := range 1000 {
		name := fmt.Sprintf("pod-%02d", i%50)
		p, _ := json.Marshal(v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"n": fmt.Sprint(i)}}})
		if err := st.Add([]store.Item{{Key: "default/" + name, Kind: store.KindPod, Payload: p}}); err != nil {
			return err
		}
	}
	return st.Close()
}

// fleetBench runs podhub serve (embedded broker) with simulated devices
// (real agents, each with its own SQLite store, in this process): the
// time from podhub apply to every device's ack, and podhub's RSS.
func fleetBench(binDir, dir string, devices int) error {
	podhub := filepath.Join(binDir, "podhub")
	ph, err := startPodhub(podhub, dir)
	if err != nil {
		return err
	}
	defer ph.stop()
	client, data, addr := ph.client, ph.data, ph.addr
	idle := rss(ph.pid())
	var memIdle podhubMemory
	if err := client.Do("GET", "/v1/debug/memory", nil, &memIdle); err != nil {
		return fmt.Errorf("podhub's memory breakdown: %w", err)
	}
	// Every simulated device gets its certificate from the hub's CA, as
	// podhub device add issues it.
	enrolled, err := simfleet.LoadEnrolment(data, addr)
	if err != nil {
		return err
	}

	stop := make(chan struct{})
	defer close(stop)
	var stores []*store.Store
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	// The simulated devices' stores in memory where the machine has a
	// tmpfs: a device stores its desired document with synchronous=FULL
	// before it acks, and 3,000 devices sharing this machine's one disk
	// would queue their fsyncs behind each other, where each real device
	// has its own.
	devDir, err := os.MkdirTemp("/dev/shm", "podvisor-bench-devices")
	if err != nil {
		devDir = filepath.Join(dir, "devices")
	}
	defer os.RemoveAll(devDir)
	// Enrolled (labelled) first, as an operator does before a device
	// connects: the hub believes only devices it knows. Not timed.
	for i := range devices {
		group := "bench" // the apply's selector
		if *hubApplyDevices > 0 && i >= *hubApplyDevices {
			group = "idle"
		}
		if err := client.Do("PUT", fmt.Sprintf("/v1/devices/sim-%04d/labels", i), map[string]string{"fleet": group}, nil); err != nil {
			return err
		}
	}
	targets := devices
	if *hubApplyDevices > 0 {
		targets = min(devices, *hubApplyDevices)
	}
	applies := newFleetApplies(targets)
	var wg sync.WaitGroup
	connectStart := time.Now()
	for i := range devices {
		st, err := store.Open(filepath.Join(devDir, fmt.Sprintf("d%04d", i), "state.db"), store.DefaultLimits)
		if err != nil {
			return err
		}
		stores = append(stores, st)
		var pods uplink.Pods = quietPods{}
		if i < targets {
			pods = countingPods{once: new(sync.Once), applied: applies}
		}
		a, err := enrolled.Agent(fmt.Sprintf("sim-%04d", i), st, pods, *hubHeartbeat, silent)
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); a.Run(stop) }()
	}
	var ds []fleetdb.Device
	var listErr error
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if listErr = client.Do("GET", "/v1/devices", nil, &ds); listErr == nil && countReady(ds) == devices {
			break
		}
		if time.Now().After(deadline) {
			dump := filepath.Join(os.TempDir(), "podhub-goroutines.txt")
			if err := saveDebug(filepath.Join(data, "podhub.sock"), "/debug/pprof/goroutine?debug=1", dump); err != nil {
				dump = err.Error()
			}
			return fmt.Errorf("only %d of %d simulated devices connected in 5 min (last listing error: %v; podhub's goroutines: %s); podhub's log ends:\n%s",
				countReady(ds), devices, listErr, dump, lastLines(ph.log.String(), 30))
		}
	}
	connected := time.Since(connectStart)
	time.Sleep(5 * time.Second) // the connection storm's garbage collected
	idleFleet := rss(ph.pid())
	if *hubHeapProfile != "" {
		if err := saveDebug(filepath.Join(data, "podhub.sock"), "/debug/pprof/heap?gc=1", *hubHeapProfile); err != nil {
			return err
		}
	}
	var memFleet, memWindow podhubMemory
	if err := client.Do("GET", "/v1/debug/memory", nil, &memFleet); err != nil {
		return fmt.Errorf("podhub's memory breakdown: %w", err)
	}
	// What the connected fleet costs podhub's CPU (heartbeats, MQTT
	// pings, the collector).
	cpuBefore, _ := cpuTicks(ph.pid())
	time.Sleep(*hubIdleWindow)
	cpuAfter, _ := cpuTicks(ph.pid())
	if err := client.Do("GET", "/v1/debug/memory", nil, &memWindow); err != nil {
		return fmt.Errorf("podhub's memory breakdown: %w", err)
	}

	pod := json.RawMessage(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"greeter"},"spec":{"runtimeClassName":"process","containers":[{"name":"app","image":"host","command":["sleep","1000"]}]}}`)
	profiled := make(chan error, 1)
	if *hubCPUProfile != "" {
		// With the allocations before and after (go tool pprof -base).
		if err := saveDebug(filepath.Join(data, "podhub.sock"), "/debug/pprof/allocs", *hubCPUProfile+".allocs0"); err != nil {
			return err
		}
		// Started first: the profile covers the apply and the acks.
		go func() {
			profiled <- saveDebug(filepath.Join(data, "podhub.sock"), "/debug/pprof/profile?seconds=5", *hubCPUProfile)
		}()
		time.Sleep(100 * time.Millisecond)
	} else if *hubTrace != "" {
		go func() {
			profiled <- saveDebug(filepath.Join(data, "podhub.sock"), "/debug/pprof/trace?seconds=3", *hubTrace)
		}()
		time.Sleep(100 * time.Millisecond)
	} else {
		profiled <- nil
	}
	var memApply podhubMemory
	if err := client.Do("GET", "/v1/debug/memory", nil, &memApply); err != nil {
		return fmt.Errorf("podhub's memory breakdown: %w", err)
	}
	// The 3,000 simulated devices share this process's heap: a collection
	// of it in the timed window (0.2 to 0.45 s of CPU on this machine,
	// against podhub for the two cores) is the simulation's cost, not a
	// device's (each has a small heap of its own) nor the hub's. It is
	// collected before the clock starts; a collection that still comes in
	// the window is counted on the devices' line.
	runtime.GC()
	applyCPU0, _ := cpuTicks(ph.pid())
	devicesCPU0, devicesGC0 := processCPU(), readGC()
	stopDevicesProfile, err := startDevicesProfile()
	if err != nil {
		return err
	}
	start := time.Now()
	var applied []api.Applied
	if err := client.Do("POST", "/v1/apply", api.ApplyRequest{Selector: map[string]string{"fleet": "bench"}, Pods: []json.RawMessage{pod}}, &applied); err != nil {
		return err
	}
	applyDone := time.Since(start)
	if len(applied) != targets {
		return fmt.Errorf("the apply reached %d devices, want %d", len(applied), targets)
	}
	// The devices first (in this process: no load on podhub), as each
	// applies the document it stored, then podhub's listing of 3,000
	// devices, which is not cheap, until it has every ack.
	select {
	case <-applies.all:
	case <-time.After(3 * time.Minute):
		return fmt.Errorf("%d of %d devices did not store and apply the document in 3 min", applies.remaining.Load(), targets)
	}
	// Then podhub: its listing once (3,000 devices, not cheap: polled,
	// its garbage alone made podhub collect during the apply), then only
	// the devices it did not show acked, one at a time.
	if err := client.Do("GET", "/v1/devices", nil, &ds); err != nil {
		return err
	}
	var unacked []string
	for _, d := range ds {
		if d.Labels["fleet"] == "bench" && d.ObservedGeneration < 1 {
			unacked = append(unacked, d.ID)
		}
	}
	for deadline := time.Now().Add(3 * time.Minute); len(unacked) > 0; {
		var d api.DeviceDetail
		if err := client.Do("GET", "/v1/devices/"+unacked[0], nil, &d); err == nil && d.ObservedGeneration >= 1 {
			unacked = unacked[1:]
			continue
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d devices not acked in 3 min", len(unacked), targets)
		}
		time.Sleep(5 * time.Millisecond)
	}
	acked := time.Since(start)
	applyCPU1, _ := cpuTicks(ph.pid())
	devicesCPU, devicesGC := processCPU()-devicesCPU0, readGC().since(devicesGC0)
	stopDevicesProfile()
	var memAcked podhubMemory
	if err := client.Do("GET", "/v1/debug/memory", nil, &memAcked); err != nil {
		return fmt.Errorf("podhub's memory breakdown: %w", err)
	}
	full := rss(ph.pid())
	if err := <-profiled; err != nil {
		return err
	}
	if *hubCPUProfile != "" {
		if err := saveDebug(filepath.Join(data, "podhub.sock"), "/debug/pprof/allocs", *hubCPUProfile+".allocs1"); err != nil {
			return err
		}
	}
	fmt.Printf("podhub with %d simulated devices (real agents, one SQLite store each, in the bench process)\n", devices)
	fmt.Printf("  all connected and Ready (TLS, client certificates)     %8.2f s\n", connected.Seconds())
	fmt.Printf("  podhub RSS with %d idle devices                      %6.1f MiB (%.1f KiB per device)\n", devices, idleFleet.total,
		(idleFleet.total-idle.total)*1024/float64(devices))
	perDevice := func(f func(podhubMemory) uint64) float64 {
		return (float64(f(memFleet)) - float64(f(memIdle))) / 1024 / float64(devices)
	}
	fmt.Printf("    per device, after forced GCs: stacks %.1f KiB (%.2f goroutines), live heap %.1f, free heap %.1f, runtime %.1f; mapped %.1f\n",
		perDevice(func(m podhubMemory) uint64 { return m.StackBytes }), float64(memFleet.Goroutines-memIdle.Goroutines)/float64(devices),
		perDevice(func(m podhubMemory) uint64 { return m.HeapLiveBytes }), perDevice(func(m podhubMemory) uint64 { return m.HeapFreeBytes }),
		perDevice(func(m podhubMemory) uint64 { return m.RuntimeBytes }), perDevice(func(m podhubMemory) uint64 { return m.SysBytes }))
	window := hubIdleWindow.Seconds()
	fmt.Printf("  podhub CPU over %.0f s with the fleet connected (heartbeat %v)  %5.2f%% of a core (%d GCs: %.2f%%; %.2f MiB/s allocated)\n",
		window, *hubHeartbeat, float64(cpuAfter-cpuBefore)/clockTicks/window*100, memWindow.GCs-memFleet.GCs,
		(memWindow.GCCPUSeconds-memFleet.GCCPUSeconds)/window*100, float64(memWindow.AllocatedBytes-memFleet.AllocatedBytes)/(1<<20)/window)
	fmt.Printf("  podhub apply --selector to %d devices (sign, store, publish all) %8.2f s\n", targets, applyDone.Seconds())
	fmt.Printf("  podhub apply -> every device's ack stored at the hub   %8.2f s\n", acked.Seconds())
	fmt.Printf("    podhub's CPU from apply to the last ack: %.2f s (%d GCs, %.2f s of it in the collector; %.1f MiB allocated)\n",
		float64(applyCPU1-applyCPU0)/clockTicks, memAcked.GCs-memApply.GCs, memAcked.GCCPUSeconds-memApply.GCCPUSeconds,
		float64(memAcked.AllocatedBytes-memApply.AllocatedBytes)/(1<<20))
	fmt.Printf("    the simulated devices' CPU meanwhile (this process: TLS, signature checks, strict decoding, durable stores, acks): %.2f s (%d GCs, %.2f s of it in the collector)\n",
		devicesCPU.Seconds(), devicesGC.cycles, devicesGC.cpuSeconds)
	fmt.Printf("  podhub RSS, 0 / %d devices                          %6.1f / %.1f MiB\n", devices, idle.total, full.total)
	return nil
}

// The fleet benchmark's knobs beyond the device count.
var (
	hubHeapProfile  = flag.String("hub-heap-profile", "", "save podhub's heap profile with -hub-devices idle devices to this file (go tool pprof)")
	hubHeartbeat    = flag.Duration("hub-heartbeat", 10*time.Minute, "the simulated devices' heartbeat period (devices default to 30s)")
	hubApplyDevices = flag.Int("hub-apply-devices", 0, "apply to the first this many simulated devices, the others idle (0: all)")
	hubCPUProfile   = flag.String("hub-cpu-profile", "", "save podhub's CPU profile of 5 s from just before the apply to this file (go tool pprof)")
	hubTrace        = flag.String("hub-trace", "", "save podhub's execution trace of 3 s from just before the apply to this file (go tool trace)")
	hubIdleWindow   = flag.Duration("hub-idle-window", 20*time.Second, "how long podhub's CPU is measured with the fleet connected")
)

// saveDebug saves what podhub's API socket answers at path (a profile).
func saveDebug(socket, path, file string) error {
	c := http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", socket)
	}}}
	resp, err := c.Get("http://podhub" + path)
	if err != nil {
		return fmt.Errorf("podhub %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("podhub %s: %s", path, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// podhubMemory is podhub's GET /v1/debug/memory (cmd/podhub's Memory).
type podhubMemory struct {
	Goroutines    int    `json:"goroutines"`
	StackBytes    uint64 `json:"stackBytes"`
	HeapLiveBytes uint64 `json:"heapLiveBytes"`
	HeapFreeBytes uint64 `json:"heapFreeBytes"`
	RuntimeBytes  uint64 `json:"runtimeBytes"`
	SysBytes      uint64 `json:"sysBytes"`
	// AllocatedBytes counts every allocation since start; GCs the
	// collections the runtime started by itself.
	AllocatedBytes uint64  `json:"allocatedBytes"`
	GCs            uint32  `json:"gcs"`
	GCCPUSeconds   float64 `json:"gcCPUSeconds"`
}

// lastLines is the end of a log.
func lastLines(log string, n int) string {
	lines := strings.Split(strings.TrimRight(log, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func countReady(ds []fleetdb.Device) int {
	n := 0
	for _, d := range ds {
		if d.Ready {
			n++
		}
	}
	return n
}
