package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"
)

// The observability benchmark's knobs (make bench-observe): what issue
// 28's metrics, dashboard and Kubernetes API cost.
var (
	observeOnly       = flag.Bool("observe-only", false, "measure only what seeing the fleet costs: the daemon with metrics off and on (-observe-pods), its scrape, the metrics code's bytes on arm64, and podhub's HTTPS listener with -observe-devices simulated devices (kubectl, /metrics, the dashboard)")
	observePods       = flag.Int("observe-pods", 0, "process pods of the daemon measured with metrics off and on (0: skip the daemon)")
	observeDevices    = flag.Int("observe-devices", 0, "simulated devices behind podhub's HTTPS listener (0: skip the hub)")
	observeDevicePods = flag.Int("observe-device-pods", 10, "pods each simulated device runs (as many DaemonSets applied)")
	observeScrapes    = flag.Int("observe-scrapes", 50, "scrapes timed of each /metrics")
	observeRuns       = flag.Int("observe-runs", 7, "timed runs of each kubectl command and each dashboard load")
)

// observeBench runs the observability measurements the flags ask for.
func observeBench(bin string) error {
	abs, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	fmt.Printf("\nseeing the fleet (issue 28: metrics, dashboard, Kubernetes API) — %s, %d CPUs, Linux %s, %s, load average %s\n",
		cpuModel(), runtime.NumCPU(), kernel(), time.Now().UTC().Format(time.RFC3339), loadAverage())
	var errs []error
	if *observePods > 0 {
		if err := observeDaemon(abs, *observePods, *observeScrapes); err != nil {
			fmt.Printf("  the daemon: FAILED: %v\n", err)
			errs = append(errs, err)
		}
		if err := metricsCodeBytes(); err != nil {
			fmt.Printf("  the metrics code's bytes: FAILED: %v\n", err)
			errs = append(errs, err)
		}
	}
	if *observeDevices > 0 {
		if err := observeHub(abs, *observeDevices, *observeDevicePods); err != nil {
			errs = append(errs, err)
		}
	}
	fmt.Printf("  load average after: %s; no peer measured (no kubelet nor API server runs here)\n", loadAverage())
	return errors.Join(errs...)
}

// daemonMetricsPieces says whether this tree's podvisor serves metrics:
// its run command has --metrics-listen.
func daemonMetricsPieces(bin string) bool {
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput()
	return bytes.Contains(out, []byte("-metrics-listen"))
}

// footprint is the daemon and its keeper's memory with the pods running.
type footprint struct {
	daemon, keeper group
}

func (f footprint) pss() float64 { return f.daemon.pss + f.keeper.pss }
func (f footprint) rss() float64 { return f.daemon.rss + f.keeper.rss }

// measureFootprint reads the daemon's and its keeper's smaps_rollup.
func (b *bench) measureFootprint() footprint {
	return footprint{
		daemon: groupOf("daemon (podvisor run)", []int{b.cmd.Process.Pid}),
		keeper: groupOf("keeper (podvisor-shim --keeper)", pidsWith("--keeper\x00"+filepath.Join(b.dir, "data")+"\x00")),
	}
}

// observeDaemon runs the daemon with pods process pods twice, metrics
// off then on (a loopback listener), and compares their memory; with
// metrics on it times scrapes of /metrics.
func observeDaemon(bin string, pods, scrapes int) error {
	fmt.Printf("\ndevice metrics: podvisor run with %d process pods (sleep), metrics off vs on\n", pods)
	off, _, err := daemonWithPods(bin, pods, "", 0)
	if err != nil {
		return err
	}
	fmt.Printf("  %-44s %9s %9s %9s %9s\n", "daemon + keeper, smaps_rollup, MiB", "PSS", "PSS anon", "RSS", "private")
	if !daemonMetricsPieces(bin) {
		printFootprint("metrics off", off)
		fmt.Println("  not measured: device metrics (devmetrics: podvisor run --metrics-listen) not in this tree")
		return nil
	}
	addr := freePort()
	on, s, err := daemonWithPods(bin, pods, addr, scrapes)
	if err != nil {
		return err
	}
	printFootprint("metrics off", off)
	printFootprint("metrics on, before a scrape", s.before)
	printFootprint(fmt.Sprintf("metrics on, after %d scrapes", scrapes), on)
	anon := func(f footprint) float64 { return f.daemon.anon + f.keeper.anon }
	fmt.Printf("  metrics on - off, daemon + keeper PSS: %+.2f MiB before a scrape, %+.2f MiB after %d (anonymous %+.2f, RSS %+.2f MiB)\n",
		s.before.pss()-off.pss(), on.pss()-off.pss(), scrapes, anon(on)-anon(off), on.rss()-off.rss())
	fmt.Printf("  GET http://%s/metrics with %d pods (n=%d, %d bytes, %s): %s\n", addr, pods, scrapes, s.size, s.running, dist(s.times))
	return nil
}

func printFootprint(label string, f footprint) {
	fmt.Printf("  %-44s %9.2f %9.2f %9.2f %9.2f   (daemon PSS %.2f + keeper %.2f, %d keeper)\n", label,
		f.pss(), f.daemon.anon+f.keeper.anon, f.rss(), f.daemon.private+f.keeper.private, f.daemon.pss, f.keeper.pss, f.keeper.count)
}

// scrapeResult is what the scrapes of a daemon's /metrics measured.
type scrapeResult struct {
	before  footprint // with metrics on, before the first scrape
	times   []time.Duration
	size    int
	running string // the kubelet_running_pods line, as a check
}

// daemonWithPods starts a daemon (metricsAddr: its --metrics-listen, ""
// for none), runs pods process pods, waits for them, measures its
// memory after scrapes scrapes of /metrics, and stops it with its pods.
func daemonWithPods(bin string, pods int, metricsAddr string, scrapes int) (footprint, scrapeResult, error) {
	var s scrapeResult
	dir, err := os.MkdirTemp("", "podvisor-observebench")
	if err != nil {
		return footprint{}, s, err
	}
	defer os.RemoveAll(dir)
	var extra []string
	if metricsAddr != "" {
		extra = []string{"--metrics-listen", metricsAddr}
	}
	b, err := startDaemon(bin, dir, extra...)
	if err != nil {
		return footprint{}, s, err
	}
	defer b.stop()
	if err := b.fill(pods); err != nil {
		return footprint{}, s, err
	}
	time.Sleep(3 * time.Second) // the start's garbage collected, the keeper settled
	if metricsAddr == "" {
		return b.measureFootprint(), s, nil
	}
	s.before = b.measureFootprint()
	client := &http.Client{Timeout: 10 * time.Second}
	for range scrapes {
		start := time.Now()
		body, err := httpGet(client, "http://"+metricsAddr+"/metrics", "")
		if err != nil {
			return footprint{}, s, fmt.Errorf("scraping the daemon: %w", err)
		}
		s.times = append(s.times, time.Since(start))
		s.size = len(body)
		s.running = metricLine(body, "kubelet_running_pods")
	}
	time.Sleep(time.Second)
	return b.measureFootprint(), s, nil
}

// httpGet fetches url (with a bearer token unless ""), reads the whole
// answer and fails on any status but 200.
func httpGet(client *http.Client, url, token string) ([]byte, error) {
	req, err := http.NewRequestWithContext(context.Background(), "GET", url, nil)
	if err != nil {
		return nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return body, &httpStatus{url: url, code: resp.StatusCode, body: string(body[:min(len(body), 300)])}
	}
	return body, nil
}

// httpStatus is an answer other than 200.
type httpStatus struct {
	url  string
	code int
	body string
}

func (e *httpStatus) Error() string { return fmt.Sprintf("GET %s: %d %s", e.url, e.code, e.body) }

// metricLine is the first sample line of a family in an exposition.
func metricLine(body []byte, name string) string {
	s := bufio.NewScanner(bytes.NewReader(body))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			return line
		}
	}
	return name + " missing"
}

// metricsCodeBytes builds podvisor for arm64 as a release (symbols kept)
// and sums what packaging/sizes attributes to the metrics packages.
func metricsCodeBytes() error {
	dir, err := os.MkdirTemp("", "podvisor-observe-size")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	flags, err := exec.Command("sh", "packaging/buildflags.sh", "podvisor").Output()
	if err != nil {
		return fmt.Errorf("packaging/buildflags.sh podvisor (run the bench from the repository's root): %v", err)
	}
	out := filepath.Join(dir, "podvisor")
	args := append([]string{"build", "-trimpath"}, strings.Fields(string(flags))...)
	args = append(args, "-ldflags", "-buildid= -X main.version=bench", "-o", out, "./cmd/podvisor")
	build := exec.Command("go", args...)
	build.Env = append(os.Environ(), "GOARCH=arm64", "CGO_ENABLED=0")
	if msg, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build podvisor for arm64: %v %s", err, msg)
	}
	report, err := exec.Command("go", "run", "./packaging/sizes", "-by", "package", "-top", "0", out).Output()
	if err != nil {
		return fmt.Errorf("go run ./packaging/sizes: %v", err)
	}
	stripped, rows := sizeRows(report)
	var sum int64
	var parts, prometheus []string
	for pkg, n := range rows {
		if isMetricsPackage(pkg) {
			sum += n
			parts = append(parts, fmt.Sprintf("%s %d", strings.TrimPrefix(pkg, modulePath+"/"), n))
		}
		if strings.HasPrefix(pkg, "github.com/prometheus/") {
			prometheus = append(prometheus, pkg)
		}
	}
	slices.Sort(parts)
	fmt.Printf("\npodvisor arm64 (release flags, go run ./packaging/sizes -by package): %.2f MiB stripped\n", float64(stripped)/(1<<20))
	if len(parts) == 0 {
		fmt.Println("  not measured: no metrics package linked into podvisor (devmetrics not in this tree)")
	} else {
		fmt.Printf("  the metrics packages' symbols: %d bytes = %.1f KiB (%s); their share of .gopclntab and the\n", sum, float64(sum)/1024, strings.Join(parts, ", "))
		fmt.Println("  code they add to the supervisor, uplink and cmd packages are not counted")
	}
	if len(prometheus) > 0 {
		fmt.Printf("  WARNING: Prometheus' modules reached the binary: %s\n", strings.Join(prometheus, ", "))
	} else {
		fmt.Println("  no github.com/prometheus/... package in the binary (the exposition's parser stays a test-only import)")
	}
	return nil
}

// modulePath is podvisor's module.
const modulePath = "github.com/podvisor/podvisor"

// isMetricsPackage: podvisor's packages named metrics or ending in it
// (metrics, supervisor/devmetrics).
func isMetricsPackage(pkg string) bool {
	if !strings.HasPrefix(pkg, modulePath+"/") {
		return false
	}
	return strings.HasSuffix(filepath.Base(pkg), "metrics")
}

// sizeRows parses packaging/sizes' report: the stripped size and the
// bytes of each package row.
func sizeRows(report []byte) (stripped int64, rows map[string]int64) {
	rows = map[string]int64{}
	for _, line := range strings.Split(string(report), "\n") {
		if i := strings.Index(line, "stripped ("); i >= 0 {
			fmt.Sscanf(line[i+len("stripped ("):], "%d", &stripped)
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		n, err := strconv.ParseInt(f[0], 10, 64)
		if err == nil && strings.Contains(f[2], "/") {
			rows[f[2]] += n
		}
	}
	return stripped, rows
}
