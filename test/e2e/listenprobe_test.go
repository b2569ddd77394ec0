package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/test/listenserver"
)

// listenServerEnv makes this test binary a pod's server (see init):
// "PORT DELAY STAMP CLOSEON" — listen on 127.0.0.1:PORT after DELAY,
// write the time of listen()'s return to STAMP, and close the listener
// (writing the close time to STAMP.closed) once the file CLOSEON exists.
const listenServerEnv = "PODVISOR_E2E_LISTEN_SERVER"

// flapServerEnv makes this test binary a server that keeps listening on
// and closing 127.0.0.1:PORT, every INTERVAL: "PORT INTERVAL".
const flapServerEnv = "PODVISOR_E2E_FLAP_SERVER"

func init() {
	if spec := os.Getenv(listenServerEnv); spec != "" {
		os.Exit(listenserver.Run(spec))
	}
	if spec := os.Getenv(flapServerEnv); spec != "" {
		os.Exit(flapServer(spec))
	}
}

func flapServer(spec string) int {
	var port int
	var intervalText string
	_, err := fmt.Sscan(spec, &port, &intervalText)
	interval, derr := time.ParseDuration(intervalText)
	if err != nil || derr != nil {
		fmt.Fprintln(os.Stderr, "flap server:", err, derr)
		return 2
	}
	for {
		if ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
			time.Sleep(interval)
			ln.Close()
		}
		time.Sleep(interval)
	}
}

// listenPod is a process pod running the listen server on port, with a
// readiness tcpSocket probe on probePort (by the name "web" when they are
// the same) every 30 s; failureThreshold 1, so one failed run is unready.
func listenPod(t *testing.T, name string, port, probePort int, delay time.Duration, stamp, closeOn string) string {
	probe := strconv.Itoa(probePort)
	if probePort == port {
		probe = "web"
	}
	return serverPod(t, name, listenServerEnv, fmt.Sprintf("%d %s %s %s", port, delay, stamp, closeOn), fmt.Sprintf(`    ports: [{name: web, containerPort: %d}]
    readinessProbe:
      tcpSocket: {port: %s}
      periodSeconds: 30
      failureThreshold: 1
`, port, probe))
}

// serverPod is a process pod whose container runs this test binary as
// the server env selects (see init), given spec; more is the rest of the
// container's fields.
func serverPod(t *testing.T, name, env, spec, more string) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return listenserver.Pod(name, self, env, spec, more)
}

func podReady(p *v1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == v1.PodReady {
			return c.Status == v1.ConditionTrue
		}
	}
	return false
}

// readStamp reads a time the server wrote, waiting for it: the daemon
// may be quicker than the server's write, done after listen() or close().
func readStamp(t *testing.T, path string) time.Time {
	t.Helper()
	waitFor(t, "the server's time stamp "+filepath.Base(path), func() bool { return exists(path) })
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the server's time stamp: %v", err)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(data)), 10, 64)
	if err != nil {
		t.Fatalf("the server's time stamp %q: %v", data, err)
	}
	return time.Unix(0, n)
}

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) int {
	_, p, _ := net.SplitHostPort(freeLoopback(t))
	n, _ := strconv.Atoi(p)
	return n
}

// verdictRun waits for the daemon's log line of the pod's latest
// readiness verdict ok and returns which run changed it: "listen event"
// (a listener's opening or closing ran the probe) or "period". What made
// the verdict, not how fast it came: test/bench's listen rows measure
// that.
func verdictRun(t *testing.T, d *daemon, pod, container string, ok bool) string {
	t.Helper()
	prefix := fmt.Sprintf(`msg="probe verdict" pod=default/%s container=%s probe=Readiness ok=%v run=`, pod, container, ok)
	var run string
	waitFor(t, fmt.Sprintf("the daemon's log line of %s's readiness verdict ok=%v", pod, ok), func() bool {
		log := d.log.String()
		i := strings.LastIndex(log, prefix)
		if i < 0 {
			return false
		}
		line, _, _ := strings.Cut(log[i+len(prefix):], "\n")
		run = strings.Trim(line, `"`)
		return true
	})
	return run
}

// nodeListenPath is the listen path the node's status shows.
func nodeListenPath(t *testing.T, d *daemon) string {
	out, stderr, code := d.cli("get", "node", "-o", "json")
	if code != 0 {
		t.Fatalf("get node -o json: exit %d: %s", code, stderr)
	}
	var n v1.Node
	if err := json.Unmarshal([]byte(out), &n); err != nil {
		t.Fatalf("get node -o json: %v\n%s", err, out)
	}
	return n.Annotations["podvisor.io/listen-path"]
}

// A pod whose server listens 6 s after it started, probed every 30 s, is
// Ready within bound of its listen(); closing the listener makes it
// unready long before the next period. On each listen path, each forced
// by the config where it is a fallback, with the same outcomes.
func TestListenDrivenReadiness(t *testing.T) {
	for _, tc := range []struct {
		name, config, path string
		run                string // the run that changes the verdicts
		period             int    // the probe's periodSeconds
	}{
		// eBPF: the listen() itself is the event (1–3 ms to Ready here).
		{"ebpf", "", "ebpf-sockops", "listen event", 30},
		// eBPF refused: sock_diag learns of a listener by a dump, at most
		// 1 s apart in the 30 s after a container start
		// (listen.NextDump), when both happen.
		{"sockdiag", "probes: {ebpf: false}\n", "sock_diag", "listen event", 30},
		{"sockdiag-listen", "probes: {listen: sockdiag}\n", "sock_diag", "listen event", 30},
		// sock_diag refused too: the probe's period alone, made short so
		// the test is too.
		{"periodic", "probes: {listen: off}\n", "periodic", "period", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requireRoot(t)
			d := newDaemon(t)
			d.withConfig(tc.config + "cgroups: {root: " + d.cgroupRoot("listen-"+tc.name) + "}\n")
			d.start()
			if got := nodeListenPath(t, d); got != tc.path {
				if tc.path == "ebpf-sockops" {
					prerequisite(t, "listen path is %q, not eBPF:\n%s", got, d.log)
				}
				t.Fatalf("node's listen path = %q, want %q", got, tc.path)
			}
			port, stamp, closeOn := freePort(t), filepath.Join(d.dir, "listened"), filepath.Join(d.dir, "close")
			// It listens 6 s after its start: the first periodic run
			// (due within 1 s) is over by then even on a busy machine.
			pod := listenPod(t, "srv", port, port, 6*time.Second, stamp, closeOn)
			d.write("srv.yaml", strings.Replace(pod, "periodSeconds: 30", fmt.Sprintf("periodSeconds: %d", tc.period), 1))

			var readyAt time.Time
			d.waitPod("srv", 20*time.Second, func(p *v1.Pod) bool {
				if podReady(p) {
					readyAt = time.Now()
					return true
				}
				return false
			})
			listened := readStamp(t, stamp)
			lag := readyAt.Sub(listened)
			t.Logf("%s: Ready %v after listen()", tc.name, lag)
			if run := verdictRun(t, d, "srv", "app", true); run != tc.run {
				t.Fatalf("Ready by a %s run %v after listen(), want a %s run", run, lag, tc.run)
			}

			if err := writeString(closeOn, ""); err != nil {
				t.Fatal(err)
			}
			var unreadyAt time.Time
			d.waitPod("srv", 20*time.Second, func(p *v1.Pod) bool {
				if !podReady(p) {
					unreadyAt = time.Now()
					return true
				}
				return false
			})
			closed := readStamp(t, stamp+".closed")
			lag = unreadyAt.Sub(closed)
			t.Logf("%s: unready %v after close()", tc.name, lag)
			if run := verdictRun(t, d, "srv", "app", false); run != tc.run {
				t.Fatalf("unready by a %s run %v after close(), want a %s run", run, lag, tc.run)
			}
		})
	}
}

// A pod listening on a port that is not its probe's triggers no probe:
// the probe's port (served by the test, counting connections) sees no
// connection around that listen().
func TestListenOtherPortDoesNotTrigger(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.withConfig("cgroups: {root: " + d.cgroupRoot("listen-other") + "}\n")
	d.start()
	if got := nodeListenPath(t, d); got != "ebpf-sockops" {
		prerequisite(t, "listen path is %q, not eBPF", got)
	}
	probed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer probed.Close()
	var mu sync.Mutex
	var dials []time.Time
	go func() {
		for {
			c, err := probed.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			dials = append(dials, time.Now())
			mu.Unlock()
			c.Close()
		}
	}()
	probePort := probed.Addr().(*net.TCPAddr).Port
	stamp := filepath.Join(d.dir, "listened")
	// The server listens 5 s in, after the first periodic run (at most
	// 3 s in, a tenth of the period) and 25 s before the next.
	d.write("other.yaml", listenPod(t, "other", freePort(t), probePort, 5*time.Second, stamp, filepath.Join(d.dir, "never")))
	waitForLong(t, 20*time.Second, "the server listened on its own port", func() bool { return exists(stamp) })
	listened := readStamp(t, stamp)
	time.Sleep(2 * time.Second) // what a trigger would have taken, twenty times over
	mu.Lock()
	defer mu.Unlock()
	for _, at := range dials {
		if at.After(listened) {
			t.Fatalf("the probe ran %v after a listen() on another port (probe connections at %v)", at.Sub(listened), dials)
		}
	}
	if len(dials) != 1 {
		t.Fatalf("%d probe connections, want 1 (the first periodic run)", len(dials))
	}
}

// After a kill -9 and a restart the daemon watches the adopted pod again:
// its listener, open before the watch, still turns the pod unready the
// moment it closes.
func TestListenProbesAfterDaemonKill(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.withConfig("cgroups: {root: " + d.cgroupRoot("listen-restart") + "}\n")
	d.start()
	if got := nodeListenPath(t, d); got != "ebpf-sockops" {
		prerequisite(t, "listen path is %q, not eBPF", got)
	}
	port, stamp, closeOn := freePort(t), filepath.Join(d.dir, "listened"), filepath.Join(d.dir, "close")
	d.write("srv.yaml", listenPod(t, "srv", port, port, time.Second, stamp, closeOn))
	d.waitPod("srv", 20*time.Second, podReady)

	d.stop(syscall.SIGKILL)
	d.start()
	// Closed before the new daemon watches, the listener would be missed
	// until the next period: wait for the watch.
	waitFor(t, "the restarted daemon watched the adopted pod's listeners", func() bool {
		return strings.Contains(d.log.String(), `msg="listeners watched" pod=default/srv`)
	})
	d.waitPod("srv", 20*time.Second, func(p *v1.Pod) bool { return podReady(p) && running(p) })
	if err := writeString(closeOn, ""); err != nil {
		t.Fatal(err)
	}
	var unreadyAt time.Time
	d.waitPod("srv", 20*time.Second, func(p *v1.Pod) bool {
		if !podReady(p) {
			unreadyAt = time.Now()
			return true
		}
		return false
	})
	lag := unreadyAt.Sub(readStamp(t, stamp+".closed"))
	t.Logf("after a restart: unready %v after close()", lag)
	if run := verdictRun(t, d, "srv", "app", false); run != "listen event" {
		t.Fatalf("after a restart: unready by a %s run %v after close(), want the close's listen event (the period is 30 s)", run, lag)
	}
}

// Without cgroups there is nothing to watch: the node says probes are
// periodic, and a listen-probed pod still turns Ready by its period.
func TestListenPathPeriodicWithoutCgroups(t *testing.T) {
	d := newDaemon(t)
	d.withConfig("cgroups: {root: \"\"}\n")
	d.start()
	if got := nodeListenPath(t, d); got != "periodic" {
		t.Fatalf("node's listen path without cgroups = %q, want periodic", got)
	}
	port, stamp := freePort(t), filepath.Join(d.dir, "listened")
	pod := strings.Replace(listenPod(t, "srv", port, port, 0, stamp, filepath.Join(d.dir, "never")), "periodSeconds: 30", "periodSeconds: 1", 1)
	d.write("srv.yaml", pod)
	d.waitPod("srv", 20*time.Second, podReady)
}
