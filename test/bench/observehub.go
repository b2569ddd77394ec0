package main

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// observeContainer is the one container of the benchmark's DaemonSets.
const observeContainer = `containers: [{name: c, image: "process:///bin/sleep", args: ["1000"], resources: {requests: {cpu: 10m, memory: 8Mi}}}]`

// hubSite is podhub's HTTPS listener as a client of the bench sees it.
type hubSite struct {
	base   string // https://HOST:PORT
	token  string
	client *http.Client // trusts podhub's CA only
}

// get fetches path with the bearer token.
func (s hubSite) get(path string) ([]byte, error) { return httpGet(s.client, s.base+path, s.token) }

// served says whether path answers at all: an error but 404 (nothing
// mounted there) is the bench's failure, not a missing piece.
func (s hubSite) served(path string) (bool, error) {
	_, err := s.get(path)
	var st *httpStatus
	if errors.As(err, &st) && st.code == http.StatusNotFound {
		return false, nil
	}
	return err == nil, err
}

// observeHub runs podhub serve with its HTTPS listener and n simulated
// devices running podsPer pods each (as many DaemonSets), then times
// what an operator looking at the fleet does: kubectl get pods -A and
// get nodes, a /metrics scrape, the dashboard's pods page (its HTML,
// assets and JSON; rendered by headless Chromium where installed), and
// reads podhub's memory.
func observeHub(bin string, n, podsPer int) error {
	dir, err := os.MkdirTemp("", "podvisor-observebench-hub")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	podhub := filepath.Join(filepath.Dir(bin), "podhub")
	httpAddr := freePort()
	ph, err := startPodhub(podhub, dir, "--device-timeout", (3 * *hubHeartbeat).String(), "--http-listen", httpAddr)
	if err != nil {
		return err
	}
	defer ph.stop()
	fmt.Printf("\nthe hub seen: podhub serve --http-listen %s, %d simulated devices (test/simfleet ReadyDevice agents) x %d pods\n", httpAddr, n, podsPer)
	start := time.Now()
	if err := enrolSimDevices(ph.client, n); err != nil {
		return err
	}
	stopChildren, err := simChildren(ph, n, dir, "1s", func(r io.Reader) { io.Copy(io.Discard, r) })
	if err != nil {
		return err
	}
	defer stopChildren()
	docs := make([]string, podsPer)
	for k := range docs {
		docs[k] = workloadfile.DaemonSet(fmt.Sprintf("observe-%d", k), observeContainer)
	}
	if err := podhubApply(podhub, ph.data, dir, "daemonsets.yaml", workloadfile.File(docs...)); err != nil {
		return err
	}
	running, err := waitFleetPods(ph, n, podsPer, 15*time.Minute)
	if err != nil {
		return err
	}
	fmt.Printf("  fleet up: %d devices Ready, %d DaemonSets, %d pods Running and Ready as the devices report them (%.0f s); load average %s\n",
		n, podsPer, running, time.Since(start).Seconds(), loadAverage())
	time.Sleep(5 * time.Second) // the fill's garbage collected
	idle := rss(ph.pid())
	idlePSS := pssOf(ph.pid())

	site, err := hubLogin(podhub, ph.data, dir, httpAddr)
	if err != nil {
		return err
	}
	// One measurement failing (a piece's bug) is said, and the others
	// still run; the bench fails at the end.
	var failed []string
	failure := func(what string, err error) {
		if err != nil {
			fmt.Printf("  %s: FAILED: %v\n", what, err)
			failed = append(failed, what)
		}
	}
	failure("kubectl", observeKubectl(site, filepath.Join(dir, "kubeconfig"), dir, n, n*podsPer))
	failure("hub /metrics", observeHubMetrics(site, *observeScrapes))
	dashboard, err := observeDashboard(site, *observeRuns)
	failure("dashboard", err)
	if dashboard && err == nil {
		failure("dashboard in Chromium", observeChromium(site, *observeRuns, filepath.Join(dir, "chromium"), ph.pid()))
	}
	full := rss(ph.pid())
	peak := procMiB(fmt.Sprintf("/proc/%d/status", ph.pid()))["VmHWM:"]
	fmt.Printf("  podhub memory, HTTPS listener on: RSS %.1f MiB (PSS %.1f) with the fleet up, before any HTTP request;\n", idle.total, idlePSS.pss)
	fmt.Printf("    RSS %.1f MiB after the requests above, peak (VmHWM) %.1f MiB\n", full.total, peak)
	if len(failed) > 0 {
		return fmt.Errorf("the hub's measurements failed: %s", strings.Join(failed, ", "))
	}
	return nil
}

// waitFleetPods waits until the hub's API shows n*podsPer pods bound,
// Running and Ready as the devices report them, and returns how many.
func waitFleetPods(ph *podhubServe, n, podsPer int, timeout time.Duration) (int, error) {
	want := n * podsPer
	var ready int
	var err error
	for deadline := time.Now().Add(timeout); ; time.Sleep(2 * time.Second) {
		var list v1.PodList
		if err = ph.client.Do("GET", "/v1/pods", nil, &list); err == nil {
			ready = 0
			for _, p := range list.Items {
				if p.Spec.NodeName != "" && p.Status.Phase == v1.PodRunning && podReady(&p) {
					ready++
				}
			}
			if ready >= want {
				return ready, nil
			}
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("after %s the hub shows %d of %d pods Running and Ready (%v); podhub's log ends:\n%s",
				timeout, ready, want, err, lastLines(ph.log.String(), 30))
		}
	}
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// hubLogin makes a token with podhub token create (and its kubeconfig,
// dir/kubeconfig) and a client trusting podhub's CA.
func hubLogin(podhub, data, dir, httpAddr string) (hubSite, error) {
	base := "https://" + httpAddr
	kubeconfig := filepath.Join(dir, "kubeconfig")
	out, err := exec.Command(podhub, "--data-dir", data, "token", "create", "observe-bench",
		"--kubeconfig", kubeconfig, "--server", base).Output()
	if err != nil {
		return hubSite{}, fmt.Errorf("podhub token create: %v", err)
	}
	token, _, _ := strings.Cut(string(out), "\n")
	ca, err := pki.Load(filepath.Join(data, "pki"))
	if err != nil {
		return hubSite{}, err
	}
	client := &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	return hubSite{base: base, token: strings.TrimSpace(token), client: client}, nil
}

// kubectl is one kubectl binary the bench times, and what it is.
type kubectl struct{ path, what string }

// scriptKubectl runs one of test/kubectl's scripts, which print the
// path of the kubectl they built or unpacked (cached).
func scriptKubectl(script, what string) (kubectl, error) {
	out, err := exec.Command("sh", script).Output()
	if err != nil {
		return kubectl{}, fmt.Errorf("%s: %v", script, err)
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return kubectl{}, fmt.Errorf("%s printed no path", script)
	}
	return kubectl{f[len(f)-1], what}, nil
}

// gitVersion finds the version in an old kubectl's version.Info.
var gitVersion = regexp.MustCompile(`GitVersion:"([^"]+)"`)

// kubectls are the kubectls to time: test/kubectl's build of the module
// proxy's kubectl when this tree has the script (and Debian's 1.20, the
// other kubectl the tests run, where its script is), else the
// machine's.
func kubectls() ([]kubectl, error) {
	var out []kubectl
	if _, err := os.Stat("test/kubectl/build.sh"); err == nil {
		k, err := scriptKubectl("test/kubectl/build.sh", "built by test/kubectl/build.sh")
		if err != nil {
			return nil, err
		}
		out = append(out, k)
		if _, err := os.Stat("test/kubectl/debian.sh"); err == nil {
			if k, err := scriptKubectl("test/kubectl/debian.sh", "Debian's kubernetes-client, test/kubectl/debian.sh"); err == nil {
				out = append(out, k)
			} else {
				fmt.Printf("  kubectl: Debian's not measured: %v\n", err)
			}
		}
	} else if path, err := exec.LookPath("kubectl"); err == nil {
		out = append(out, kubectl{path, "the machine's, test/kubectl/build.sh not in this tree"})
	}
	for i, k := range out {
		v, _ := exec.Command(k.path, "version", "--client").Output()
		first, _, _ := strings.Cut(string(v), "\n")
		if m := gitVersion.FindStringSubmatch(first); m != nil { // kubectl before 1.28 prints a struct
			first = "Client Version: " + m[1]
		}
		out[i].what = fmt.Sprintf("%s (%s, %s)", k.path, strings.TrimSpace(first), k.what)
	}
	return out, nil
}

// observeKubectl times kubectl get pods -A and get nodes through the
// kubeconfig podhub token create wrote.
func observeKubectl(site hubSite, kubeconfig, dir string, nodes, pods int) error {
	if ok, err := site.served("/api/v1"); err != nil {
		return fmt.Errorf("the Kubernetes API: %w", err)
	} else if !ok {
		fmt.Println("  kubectl: not measured: the Kubernetes API (kubeapi) not in this tree (podhub serves no /api/v1)")
		return nil
	}
	ks, err := kubectls()
	if err != nil {
		return err
	}
	if len(ks) == 0 {
		fmt.Println("  kubectl: not measured: no kubectl (test/kubectl/build.sh not in this tree, none installed)")
		return nil
	}
	for i, k := range ks {
		fmt.Printf("  kubectl: %s\n", k.what)
		// Discovery cached here, not in ~/.kube; each kubectl its own.
		cache := filepath.Join(dir, fmt.Sprintf("kubectl-cache-%d", i))
		for _, c := range []struct {
			args []string
			rows int
		}{{[]string{"get", "pods", "-A"}, pods}, {[]string{"get", "nodes"}, nodes}} {
			if err := timeKubectl(k.path, append([]string{"--kubeconfig", kubeconfig, "--cache-dir", cache}, c.args...), c.rows); err != nil {
				return err
			}
		}
	}
	return nil
}

// timeKubectl runs kubectl with args once (discovery not cached yet)
// and -observe-runs times more, checking it lists rows rows.
func timeKubectl(path string, args []string, rows int) error {
	command := strings.Join(args[4:], " ")
	var times []time.Duration
	var first time.Duration
	for i := 0; i <= *observeRuns; i++ {
		start := time.Now()
		out, err := exec.Command(path, args...).Output()
		took := time.Since(start)
		if err != nil {
			var msg []byte
			if ee, ok := err.(*exec.ExitError); ok {
				msg = ee.Stderr
			}
			return fmt.Errorf("kubectl %s: %v %s", command, err, msg)
		}
		if got := lineCount(out) - 1; got != rows {
			return fmt.Errorf("kubectl %s listed %d rows, the fleet has %d", command, got, rows)
		}
		if i == 0 {
			first = took
			continue
		}
		times = append(times, took)
	}
	fmt.Printf("    kubectl %-12s %5d rows: first (discovery uncached) %.2f s; then n=%d %s\n",
		command, rows, first.Seconds(), len(times), dist(times))
	return nil
}

func lineCount(b []byte) int {
	s := bufio.NewScanner(bytes.NewReader(b))
	s.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for s.Scan() {
		n++
	}
	return n
}

// observeHubMetrics times scrapes of the hub's /metrics.
func observeHubMetrics(site hubSite, scrapes int) error {
	if ok, err := site.served("/metrics"); err != nil {
		return fmt.Errorf("the hub's /metrics: %w", err)
	} else if !ok {
		fmt.Println("  hub /metrics: not measured: the hub's metrics (hubmetrics) not in this tree (podhub serves no /metrics)")
		return nil
	}
	var times []time.Duration
	var body []byte
	for range scrapes {
		start := time.Now()
		b, err := site.get("/metrics")
		if err != nil {
			return err
		}
		times = append(times, time.Since(start))
		body = b
	}
	fmt.Printf("  hub GET /metrics (n=%d, %d bytes, %d series; %s): %s\n", scrapes, len(body), seriesCount(body),
		metricLine(body, "podhub_devices"), dist(times))
	return nil
}

// seriesCount counts an exposition's sample lines.
func seriesCount(body []byte) int {
	n := 0
	for _, line := range strings.Split(string(body), "\n") {
		if line != "" && !strings.HasPrefix(line, "#") {
			n++
		}
	}
	return n
}

// The dashboard's page names its assets, and its modules import others.
var (
	assetRef  = regexp.MustCompile(`(?:src|href)="(assets/[^"]+)"`)
	importRef = regexp.MustCompile(`(?m)^\s*import\s[^;]*?from\s+'\./([^']+)'`)
)

// observeDashboard times the dashboard's pods page as a browser fetches
// it: /ui/, the assets it names (and the modules they import), and the
// JSON the pods page loads. It reports whether the dashboard is there.
func observeDashboard(site hubSite, runs int) (bool, error) {
	if ok, err := site.served("/ui/"); err != nil {
		return false, fmt.Errorf("the dashboard: %w", err)
	} else if !ok {
		fmt.Println("  dashboard: not measured: the dashboard not in this tree (podhub serves no /ui/)")
		return false, nil
	}
	var page, api []time.Duration
	var pageBytes, apiBytes, assets int
	var summary string
	for range runs {
		start := time.Now()
		html, err := site.get("/ui/")
		if err != nil {
			return false, err
		}
		size, count, err := site.fetchAssets(html)
		if err != nil {
			return false, err
		}
		page = append(page, time.Since(start))
		pageBytes, assets = len(html)+size, count
		start = time.Now()
		body, err := site.get("/ui/api/pods")
		if err != nil {
			return false, err
		}
		api = append(api, time.Since(start))
		apiBytes = len(body)
		summary = podsSummary(body)
	}
	fmt.Printf("  dashboard, fetched as its page does (n=%d):\n", runs)
	fmt.Printf("    GET /ui/ and its %d assets (%d bytes)          %s\n", assets, pageBytes, dist(page))
	fmt.Printf("    GET /ui/api/pods (%d bytes; %s)  %s\n", apiBytes, summary, dist(api))
	return true, nil
}

// fetchAssets fetches what the page names and what its modules import,
// once each, and returns their bytes and count.
func (s hubSite) fetchAssets(html []byte) (int, int, error) {
	var queue []string
	for _, m := range assetRef.FindAllSubmatch(html, -1) {
		queue = append(queue, string(m[1]))
	}
	seen, size := map[string]bool{}, 0
	for len(queue) > 0 {
		a := queue[0]
		queue = queue[1:]
		if seen[a] {
			continue
		}
		seen[a] = true
		body, err := s.get("/ui/" + a)
		if err != nil {
			return 0, 0, err
		}
		size += len(body)
		if strings.HasSuffix(a, ".js") {
			for _, m := range importRef.FindAllSubmatch(body, -1) {
				queue = append(queue, filepath.Join(filepath.Dir(a), string(m[1])))
			}
		}
	}
	return size, len(seen), nil
}

// podsSummary is what the pods JSON says of its size: the pods in it
// and the total, when it has those fields.
func podsSummary(body []byte) string {
	var v struct {
		Pods      []json.RawMessage `json:"pods"`
		Total     *int              `json:"total"`
		Truncated bool              `json:"truncated"`
	}
	if json.Unmarshal(body, &v) != nil || v.Total == nil {
		return "shape unknown"
	}
	s := fmt.Sprintf("%d pods of %d", len(v.Pods), *v.Total)
	if v.Truncated {
		s += ", truncated"
	}
	return s
}
