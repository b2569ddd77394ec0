// Command bench measures podvisor on this machine: manifest-to-running and
// exit-to-restart latencies, daemon memory with 0 and 50 pods, the shims'
// memory (RSS, and PSS summed over every process podvisor runs: the
// measure of the footprint budget, docs/footprint.md), binary size, and a
// restarted daemon's time to READY=1 with its pods adopted (ready.go);
// the same for containerd pods, with "podman kube play" (Debian's podman)
// as the peer measured in the same run. Latencies come from timestamps the
// workloads take themselves, so they include everything up to the workload
// running. A bare shell restart loop, measured in the same run, is the
// floor any supervisor pays for fork+exec; ratios are against it.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/supervisor/api"
)

func main() {
	bin := flag.String("bin", "bin/podvisor", "podvisor binary")
	samples := flag.Int("n", 30, "samples per latency")
	pods := flag.Int("pods", 50, "pods for the memory measurement")
	probed := flag.Int("probed", 100, "pods for the probe cost measurement (0: skip)")
	window := flag.Duration("window", 20*time.Second, "CPU measurement window per probe handler")
	evictions := flag.Int("evictions", 10, "eviction rounds (0: skip)")
	ctrdPods := flag.Int("containerd-pods", 20, "containerd pods for the memory measurement (0: skip containerd)")
	hubDevices := flag.Int("hub-devices", 1000, "simulated devices for the hub measurement (-1: skip hub sync)")
	outboxChildDB := flag.String("outbox-child", "", "internal: make 1,000 outbox changes in this database (the fsync count)")
	ctrdOnly := flag.Bool("containerd-only", false, "measure only the containerd pods and their podman peer (with -containerd-pods 0: only their latencies)")
	fleetOnly := flag.Bool("fleet-only", false, "measure only podhub with -hub-devices simulated devices (its idle cost per device)")
	hubOnly := flag.Bool("hub-only", false, "measure only hub sync: status throughput (embedded broker and Mosquitto), the outbox's fsyncs, and podhub with -hub-devices simulated devices")
	flag.Parse()
	if stop, err := startCPUProfile(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	} else {
		defer stop()
	}
	if *scaleOnly || *scaleChild != "" {
		if err := scaleBench(*bin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *hubOnly {
		abs, err := filepath.Abs(*bin)
		if err == nil {
			err = hubBench(filepath.Dir(abs), *hubDevices)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *observeOnly {
		if *observePods <= 0 && *observeDevices <= 0 {
			fmt.Fprintln(os.Stderr, "bench: -observe-only needs -observe-pods or -observe-devices > 0")
			os.Exit(1)
		}
		if err := observeBench(*bin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *objectsOnly {
		if err := objectsBench(*bin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *updateOnly {
		if *updateDevices <= 0 {
			fmt.Fprintln(os.Stderr, "bench: -update-only needs -update-devices > 0")
			os.Exit(1)
		}
		if err := updateBench(*bin, *updateDevices); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *schedChild != "" || *schedOnly || *rolloutOnly {
		if err := schedMain(*bin); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *fleetOnly {
		if err := fleetOnlyBench(*bin, *hubDevices); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *ctrdOnly {
		abs, err := filepath.Abs(*bin)
		if err == nil {
			err = containerdBench(abs, *samples, *ctrdPods)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *readyOnly {
		if err := readyOnlyBench(*bin, *readyPods, *readyRounds); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *outboxChildDB != "" {
		if err := outboxChild(*outboxChildDB); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	err := run(*bin, *samples, *pods, *probed, *window, *evictions, *ctrdPods, *hubDevices)
	if err == nil {
		err = schedBench(*bin, *schedDevices)
	}
	if err == nil {
		err = rolloutBench(*bin, *rolloutDevices, *rolloutReadyAfter)
	}
	if err == nil {
		err = updateBench(*bin, *updateDevices)
	}
	if err == nil && (*observePods > 0 || *observeDevices > 0) {
		err = observeBench(*bin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	dir, manifests, socket, marks string
	cmd                           *exec.Cmd
	client                        *api.Client
	log                           logBuffer
}

// logBuffer keeps the daemon's output, which exec's copier writes while
// the bench reads it.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func run(bin string, n, podCount, probed int, window time.Duration, evictions, ctrdPods, hubDevices int) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "podvisor-bench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b, err := startDaemon(abs, dir)
	if err != nil {
		return err
	}
	defer b.stop()

	fmt.Printf("podvisor benchmark — %s, %d CPUs, kernel %s, %s\n", cpuModel(), runtime.NumCPU(), kernel(), time.Now().UTC().Format(time.RFC3339))
	st, _ := os.Stat(abs)
	fmt.Printf("\nbinary size           %8.2f MiB  (%s)\n", float64(st.Size())/(1<<20), bin)

	time.Sleep(time.Second)
	idle := rss(b.cmd.Process.Pid)
	fmt.Printf("daemon RSS, 0 pods    %8.2f MiB  (anon %.2f MiB)\n", idle.total, idle.anon)
	idlePSS := pssOf(b.cmd.Process.Pid)
	fmt.Printf("daemon PSS, 0 pods    %8.2f MiB  (private %.2f MiB)\n", idlePSS.pss, idlePSS.private)

	toRun, toAPI, err := b.startLatency(n)
	if err != nil {
		return err
	}
	restart, err := b.restartLatency(n)
	if err != nil {
		return err
	}
	floor, err := shellLoopRestart(dir, n)
	if err != nil {
		return err
	}
	fmt.Printf("\n%-44s %8s %8s %8s\n", "latency (n="+strconv.Itoa(n)+")", "p50", "p90", "max")
	printDist("manifest write -> workload running", toRun)
	printDist("manifest write -> API reports Running", toAPI)
	printDist("process exit -> restarted workload running", restart)
	printDist("  peer: sh while-loop restart (floor)", floor)
	fmt.Printf("  restart ratio podvisor/floor at p50: %.1fx\n", float64(pct(restart, 50))/float64(pct(floor, 50)))

	if err := b.fill(podCount); err != nil {
		return err
	}
	time.Sleep(2 * time.Second)
	full := rss(b.cmd.Process.Pid)
	shims := shimRSS(filepath.Join(dir, "data", "containers"))
	fmt.Printf("\ndaemon RSS, %d pods   %8.2f MiB  (anon %.2f MiB)\n", podCount, full.total, full.anon)
	fmt.Printf("shims: %d, RSS each   %8.2f MiB  (anon %.2f MiB each; their text is shared page cache)\n",
		shims.count, shims.total/float64(max(shims.count, 1)), shims.anon/float64(max(shims.count, 1)))
	fmt.Println()
	daemon := groupOf("daemon (podvisor run)", []int{b.cmd.Process.Pid})
	// Containers with a cgroup of their own run under the keeper; the
	// others (no cgroups, the systemd driver) under a shim each.
	total := printPSS(fmt.Sprintf("process pods: %d, memory (smaps_rollup)", podCount), daemon,
		groupOf("keeper (podvisor-shim --keeper, one for all)", pidsWith("--keeper\x00"+filepath.Join(dir, "data")+"\x00")),
		groupOf("shims (podvisor-shim, one per container)", pidsWith("shim\x00"+filepath.Join(dir, "data", "containers"))))
	fmt.Printf("  daemon + keeper + shims PSS %.2f MiB, budget 32 MiB: %.2fx\n", total, total/32)
	if ws, err := reclaimCold(b.cmd.Process.Pid, 10*time.Second); err != nil {
		fmt.Printf("  daemon working set: not measured: %v\n", err)
	} else {
		fmt.Printf("  daemon PSS 10 s after its cold pages were paged out: %.2f MiB (anon %.2f): the part that stays under memory pressure\n", ws.pss, ws.anon)
	}
	for i := 0; i < podCount; i++ {
		os.Remove(filepath.Join(b.manifests, fmt.Sprintf("idle-%d.yaml", i)))
	}
	if probed > 0 {
		if err := b.probeCost(probed, window); err != nil {
			return err
		}
	}
	if evictions > 0 {
		lat, err := evictionLatency(abs, dir, evictions)
		if err != nil {
			return err
		}
		fmt.Printf("\n%-44s %8s %8s %8s\n", fmt.Sprintf("eviction (n=%d timed of %d)", len(lat), evictions), "p50", "p90", "max")
		printDist("memory.available crosses hard threshold -> SIGTERM", lat)
		fmt.Println("  (the kubelet checks every 10 s: evictionMonitoringPeriod; not measured here)")
	}
	b.stop() // one daemon measured at a time
	if *readyPods > 0 {
		if err := readyBench(abs, *readyPods, *readyRounds); err != nil {
			return err
		}
	}
	if err := listenBench(abs); err != nil {
		return err
	}
	if ctrdPods > 0 {
		if err := containerdBench(abs, n, ctrdPods); err != nil {
			return err
		}
	}
	if hubDevices >= 0 {
		return hubBench(filepath.Dir(abs), hubDevices)
	}
	return nil
}

func (b *bench) ctx() context.Context { return context.Background() }

// startDaemon runs a daemon with its directories under dir and the extra
// run arguments, and waits for its API.
func startDaemon(bin, dir string, extra ...string) (*bench, error) {
	b := &bench{dir: dir, manifests: filepath.Join(dir, "m"), socket: filepath.Join(dir, "pv.sock"), marks: filepath.Join(dir, "marks")}
	os.MkdirAll(b.manifests, 0o755)
	os.MkdirAll(b.marks, 0o755)
	args := append([]string{"run", "--manifests", b.manifests, "--data-dir", filepath.Join(dir, "data"),
		"--socket", b.socket, "--stop-pods-on-exit"}, extra...)
	b.cmd = exec.Command(bin, args...)
	b.cmd.Stdout, b.cmd.Stderr = &b.log, &b.log
	if err := b.cmd.Start(); err != nil {
		return nil, err
	}
	b.client = api.NewClient(b.socket)
	if err := b.waitUp(); err != nil {
		b.stop()
		return nil, err
	}
	return b, nil
}

// stop stops the daemon (it stops its pods) and waits for it.
func (b *bench) stop() {
	if b.cmd.ProcessState == nil {
		b.cmd.Process.Signal(syscall.SIGTERM)
		b.cmd.Wait()
	}
}

func (b *bench) waitUp() error {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := b.client.Version(context.Background()); err == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("daemon did not start:\n%s", b.log.String())
}

func manifest(name, script string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: %s}\nspec:\n  runtimeClassName: process\n  terminationGracePeriodSeconds: 2\n  containers:\n  - name: main\n    image: host\n    command: [\"sh\", \"-c\", %q]\n", name, script)
}

// write puts a manifest in place atomically and returns when it did.
func (b *bench) write(name, content string) time.Time {
	tmp := filepath.Join(b.manifests, "."+name)
	os.WriteFile(tmp, []byte(content), 0o644)
	at := time.Now()
	os.Rename(tmp, filepath.Join(b.manifests, name+".yaml"))
	return at
}

// waitRunning waits through the API watch until the pod runs.
func (b *bench) waitRunning(name string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var version uint64
	for {
		list, err := b.client.WatchPods(ctx, version)
		if err != nil {
			return time.Time{}, fmt.Errorf("pod %s never ran: %w", name, err)
		}
		fmt.Sscan(list.ResourceVersion, &version)
		for _, p := range list.Items {
			if p.Name == name && isRunning(&p) {
				return time.Now(), nil
			}
		}
	}
}

func isRunning(p *v1.Pod) bool {
	return len(p.Status.ContainerStatuses) > 0 && p.Status.ContainerStatuses[0].State.Running != nil
}

// mark reads a nanosecond timestamp a workload wrote, waiting for it.
func (b *bench) mark(name string) (time.Time, error) {
	path := filepath.Join(b.marks, name)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		data, err := os.ReadFile(path)
		if err == nil && len(bytes.TrimSpace(data)) > 0 {
			ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
			if err != nil {
				return time.Time{}, err
			}
			return time.Unix(0, ns), nil
		}
	}
	return time.Time{}, fmt.Errorf("no mark %s", name)
}

func (b *bench) startLatency(n int) (toRun, toAPI []time.Duration, err error) {
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("start-%d", i)
		at := b.write(name, manifest(name, "date +%s%N > "+filepath.Join(b.marks, name)+"; exec sleep 100000"))
		seen, err := b.waitRunning(name)
		if err != nil {
			return nil, nil, err
		}
		ran, err := b.mark(name)
		if err != nil {
			return nil, nil, err
		}
		toRun = append(toRun, ran.Sub(at))
		toAPI = append(toAPI, seen.Sub(at))
		os.Remove(filepath.Join(b.manifests, name+".yaml"))
	}
	return toRun, toAPI, nil
}

func (b *bench) restartLatency(n int) ([]time.Duration, error) {
	var out []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("restart-%d", i)
		m := filepath.Join(b.marks, name)
		script := fmt.Sprintf("if [ -e %[1]s.exit ]; then date +%%s%%N > %[1]s.start; exec sleep 100000; fi; date +%%s%%N > %[1]s.exit; exit 1", m)
		b.write(name, manifest(name, script))
		exited, err := b.mark(name + ".exit")
		if err != nil {
			return nil, err
		}
		started, err := b.mark(name + ".start")
		if err != nil {
			return nil, err
		}
		out = append(out, started.Sub(exited))
		os.Remove(filepath.Join(b.manifests, name+".yaml"))
	}
	return out, nil
}

// shellLoopRestart measures a bare "while true; do cmd; done" restarting
// the same workload: nothing but fork, exec and wait.
func shellLoopRestart(dir string, n int) ([]time.Duration, error) {
	m := filepath.Join(dir, "loop")
	script := fmt.Sprintf(`i=0; while [ $i -lt %d ]; do sh -c 'date +%%s%%N > %s.exit.'$i'; exit 1'; sh -c 'date +%%s%%N > %s.start.'$i; i=$((i+1)); done`, n, m, m)
	if out, err := exec.Command("sh", "-c", script).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("shell loop: %v: %s", err, out)
	}
	var d []time.Duration
	for i := 0; i < n; i++ {
		e, err1 := readNanos(fmt.Sprintf("%s.exit.%d", m, i))
		s, err2 := readNanos(fmt.Sprintf("%s.start.%d", m, i))
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("shell loop marks: %v %v", err1, err2)
		}
		d = append(d, s.Sub(e))
	}
	return d, nil
}

func readNanos(path string) (time.Time, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}, err
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	return time.Unix(0, ns), err
}

func (b *bench) fill(count int) error {
	for i := 0; i < count; i++ {
		name := fmt.Sprintf("idle-%d", i)
		b.write(name, manifest(name, "exec sleep 100000"))
	}
	for i := 0; i < count; i++ {
		if _, err := b.waitRunning(fmt.Sprintf("idle-%d", i)); err != nil {
			return err
		}
	}
	return nil
}

type mem struct {
	total, anon float64 // MiB
	count       int
}

func rss(pid int) mem {
	f := procMiB(fmt.Sprintf("/proc/%d/status", pid))
	return mem{total: f["VmRSS:"], anon: f["RssAnon:"]}
}

func shimRSS(containers string) mem {
	var m mem
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !strings.Contains(string(data), "shim\x00"+containers) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		r := rss(pid)
		m.total += r.total
		m.anon += r.anon
		m.count++
	}
	return m
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(len(s)-1, len(s)*p/100)]
}

func printDist(label string, d []time.Duration) {
	ms := func(x time.Duration) string { return fmt.Sprintf("%.2fms", float64(x)/1e6) }
	fmt.Printf("%-44s %8s %8s %8s\n", label, ms(pct(d, 50)), ms(pct(d, 90)), ms(pct(d, 100)))
}

func cpuModel() string {
	data, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "model name") {
			return strings.TrimSpace(strings.SplitN(line, ":", 2)[1])
		}
	}
	return runtime.GOARCH
}

func kernel() string {
	var u syscall.Utsname
	if syscall.Uname(&u) != nil {
		return "?"
	}
	var b strings.Builder
	for _, c := range u.Release {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}
