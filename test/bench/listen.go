package main

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/pod/mountinfo"
	"github.com/podvisor/podvisor/probes/listen"
	"github.com/podvisor/podvisor/test/listenserver"
)

// The listen rows (issue 15): listen() → pod Ready in the API on each
// listen path, with periodic probing as the same-run peer, and the
// daemon's idle CPU with many listen-probed pods.
var (
	listenSamples = flag.Int("listen-samples", 20, "pods per listen path for listen() -> Ready (0: skip the listen rows)")
	listenIdle    = flag.Duration("listen-idle", 60*time.Second, "daemon CPU window with -listen-idle-pods idle listen-probed pods (0: skip)")
	listenIdlePod = flag.Int("listen-idle-pods", 100, "pods for the idle CPU row")
)

// benchListenServerEnv makes this binary a pod's server: "PORT DELAY
// STAMP" — listen on 127.0.0.1:PORT after DELAY and write the time
// listen() returned to STAMP.
const benchListenServerEnv = "PODVISOR_BENCH_LISTEN_SERVER"

func init() {
	if spec := os.Getenv(benchListenServerEnv); spec != "" {
		os.Exit(listenserver.Run(spec))
	}
}

// listenBench prints the listen rows.
func listenBench(bin string) error {
	if *listenSamples <= 0 {
		return nil
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	fmt.Printf("\n%-44s %8s %8s %8s\n", fmt.Sprintf("listen() -> Ready in the API (n=%d)", *listenSamples), "p50", "p90", "max")
	for _, p := range []struct{ label, listen, want string }{
		{"eBPF sock_ops (periodSeconds 10)", "ebpf", "ebpf-sockops"},
		{"sock_diag dumps (periodSeconds 10)", "sockdiag", "sock_diag"},
		{"  peer: periodic only, periodSeconds 10", "off", "periodic"},
	} {
		lags, path, err := listenLatency(bin, self, p.listen, *listenSamples)
		if err != nil {
			return fmt.Errorf("listen %s: %w", p.listen, err)
		}
		if path != p.want {
			fmt.Printf("%-44s not measured: the daemon took the %s path\n", p.label, path)
			continue
		}
		printDist(p.label, lags)
	}
	if *listenIdle <= 0 || *listenIdlePod <= 0 {
		return nil
	}
	fmt.Printf("\nidle: %d Ready pods (busybox httpd, tcpSocket readiness every 10 s), daemon CPU over %v (target < 0.2%% with eBPF)\n", *listenIdlePod, *listenIdle)
	for _, r := range []struct {
		mode   string
		probed bool
	}{{"ebpf", true}, {"sockdiag", true}, {"off", true}, {"off", false}} {
		if err := listenIdleCPU(bin, r.mode, r.probed, *listenIdlePod, *listenIdle); err != nil {
			return fmt.Errorf("idle, listen %s: %w", r.mode, err)
		}
	}
	return nil
}

// listenDaemon starts a daemon whose probes.listen is mode, with a cgroup
// root of its own (removed by the returned stop).
func listenDaemon(bin, mode string) (*bench, func(), error) {
	dir, err := os.MkdirTemp("", "podvisor-bench-listen")
	if err != nil {
		return nil, nil, err
	}
	root := fmt.Sprintf("podvisor-bench-listen-%d-%s", os.Getpid(), mode)
	config := filepath.Join(dir, "config.yaml")
	text := fmt.Sprintf("cgroups: {root: %s}\nprobes: {listen: %q}\nnode: {maxPods: 250}\n", root, mode)
	if err := os.WriteFile(config, []byte(text), 0o644); err != nil {
		return nil, nil, err
	}
	b, err := startDaemon(bin, dir, "--config", config)
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, err
	}
	return b, func() {
		b.stop()
		removeCgroupRoot(root)
		os.RemoveAll(dir)
	}, nil
}

// listenLatency runs n pods at once, each with a server that listens at a
// random moment 0.5–9.5 s after it starts and a tcpSocket readiness probe
// every 10 s, and returns each pod's listen() → Ready (as the API's watch
// reports it) and the daemon's listen path.
func listenLatency(bin, self, mode string, n int) ([]time.Duration, string, error) {
	b, stop, err := listenDaemon(bin, mode)
	if err != nil {
		return nil, "", err
	}
	defer stop()
	node, err := b.client.Node(b.ctx())
	if err != nil {
		return nil, "", err
	}
	path := node.Annotations["podvisor.io/listen-path"]
	rng := rand.New(rand.NewPCG(15, uint64(len(mode)))) // the same delays every run
	ports := make([]int, n)
	for i := range n {
		ports[i] = freeTCPPort()
		delay := 500*time.Millisecond + time.Duration(rng.Int64N(int64(9*time.Second)))
		name := fmt.Sprintf("listen-%d", i)
		spec := fmt.Sprintf("%d %s %s", ports[i], delay, filepath.Join(b.marks, name))
		b.write(name, listenserver.Pod(name, self, benchListenServerEnv, spec,
			fmt.Sprintf("    readinessProbe: {tcpSocket: {port: %d}, periodSeconds: 10}\n", ports[i])))
	}
	ready, err := b.waitAllReady("listen-", n, 60*time.Second)
	if err != nil {
		return nil, path, err
	}
	var lags []time.Duration
	for i := range n {
		name := fmt.Sprintf("listen-%d", i)
		listened, err := b.mark(name)
		if err != nil {
			return nil, path, err
		}
		lags = append(lags, ready[name].Sub(listened))
	}
	return lags, path, nil
}

// waitAllReady watches the API until count pods named prefix* are Ready,
// and returns when each was first seen Ready.
func (b *bench) waitAllReady(prefix string, count int, timeout time.Duration) (map[string]time.Time, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ready := map[string]time.Time{}
	var version uint64
	for len(ready) < count {
		list, err := b.client.WatchPods(ctx, version)
		if err != nil {
			return nil, fmt.Errorf("%d of %d pods %s* Ready: %w", len(ready), count, prefix, err)
		}
		now := time.Now()
		fmt.Sscan(list.ResourceVersion, &version)
		for i := range list.Items {
			p := &list.Items[i]
			if _, seen := ready[p.Name]; !seen && strings.HasPrefix(p.Name, prefix) && podIsReady(p) {
				ready[p.Name] = now
			}
		}
	}
	return ready, nil
}

func podIsReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// listenIdleCPU measures the daemon's CPU over window with count Ready
// pods, each a busybox httpd probed by tcpSocket every 10 s, with
// probes.listen mode: what listen-driven probing costs when nothing
// happens, against periodic probing alone and against the same pods
// without probes (what the daemon costs anyway).
func listenIdleCPU(bin, mode string, probed bool, count int, window time.Duration) error {
	b, stop, err := listenDaemon(bin, mode)
	if err != nil {
		return err
	}
	defer stop()
	node, err := b.client.Node(b.ctx())
	if err != nil {
		return err
	}
	path := node.Annotations["podvisor.io/listen-path"]
	www := filepath.Join(b.dir, "www") // httpd serves an empty directory
	if err := os.MkdirAll(www, 0o755); err != nil {
		return err
	}
	for i := range count {
		name := fmt.Sprintf("idle-listen-%d", i)
		port := freeTCPPort()
		m := manifest(name, fmt.Sprintf("exec busybox httpd -f -p 127.0.0.1:%d -h %s", port, www))
		if probed {
			m += fmt.Sprintf("    readinessProbe: {tcpSocket: {port: %d}, periodSeconds: 10}\n", port)
		}
		b.write(name, m)
	}
	if _, err := b.waitAllReady("idle-listen-", count, 120*time.Second); err != nil {
		return err
	}
	settle := 5 * time.Second // past the start-up burst
	if mode == "sockdiag" {
		settle += listen.DumpBurstFor // and past the dumps that follow each start
	}
	time.Sleep(settle)
	self0, _ := cpuTicks(b.cmd.Process.Pid)
	time.Sleep(window)
	self1, _ := cpuTicks(b.cmd.Process.Pid)
	pct := float64(self1-self0) / (window.Seconds() * clockTicks) * 100
	label := path + " path"
	if !probed {
		label = "  baseline: the same pods without probes"
	}
	fmt.Printf("  %-42s %7.3f%% of a core\n", label, pct)
	return nil
}

// handedOut are the ports freeTCPPort gave: the kernel may offer a
// closed port again, and two pods must not share one.
var handedOut = map[int]bool{}

// freeTCPPort is a loopback port nothing listens on now, not given before.
func freeTCPPort() int {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !handedOut[port] {
			handedOut[port] = true
			return port
		}
	}
}

// removeCgroupRoot removes a daemon's (empty) cgroup root in every
// hierarchy, deepest first.
func removeCgroupRoot(root string) {
	mounts, _ := mountinfo.Read()
	for _, m := range mounts {
		if m.FSType != "cgroup" && m.FSType != "cgroup2" {
			continue
		}
		var dirs []string
		filepath.Walk(filepath.Join(m.Point, root), func(p string, info os.FileInfo, err error) error {
			if err == nil && info.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			os.Remove(dirs[i])
		}
	}
}
