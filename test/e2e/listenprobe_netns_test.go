package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// netnsListenPod is a containerd pod (a network namespace of its own)
// whose httpd listens on 8080 once /tmp/go exists, probed by tcpSocket
// every 30 s. The probe's timeout is 5 s: a listen-triggered run that
// timed out on a loaded machine would leave the pod unready for the
// period, and what is tested is the trigger, not the dial's speed.
func netnsListenPod(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", "while [ ! -e /tmp/go ]; do sleep 0.02; done; exec httpd -f -p 8080"]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 30, timeoutSeconds: 5, failureThreshold: 1}
`, name, testImage)
}

// Two pods, each in its own network namespace, probe the same port. Only
// the one whose server listens turns Ready early; when the other listens
// on that port too, its own listen() is told apart from the first (same
// port, another namespace) and turns it Ready early as well. On each
// listen path that watches containerd pods here.
func TestListenSamePortTwoNetNS(t *testing.T) {
	for _, tc := range []struct {
		name, config, path string
	}{
		{"ebpf", "", "ebpf-sockops"},
		{"sockdiag", "probes: {listen: sockdiag}\n", "sock_diag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := ctrdDaemon(t)
			if tc.config != "" {
				// probes is not under containerd, where ctrdDaemon's
				// extra config goes: restart with it.
				d.stop(syscall.SIGTERM)
				d.withConfig(d.configText + tc.config)
				d.config = ""
				d.start()
			}
			if got := nodeListenPath(t, d); got != tc.path {
				prerequisite(t, "listen path is %q, not %s:\n%s", got, tc.path, d.log)
			}
			d.write("a.yaml", netnsListenPod("a"))
			d.write("b.yaml", netnsListenPod("b"))
			started := func(p *v1.Pod) bool { return running(p) && !podReady(p) }
			d.waitPod("a", 60*time.Second, started)
			d.waitPod("b", 60*time.Second, started)
			// The first periodic runs (due within 1 s of each start, on
			// the probes' grid; 2 s more for a late timer on a busy
			// machine) have failed: both stay unready 30 s unless a
			// listen triggers a probe.
			time.Sleep(3 * time.Second)

			listen := func(name string) time.Time {
				if out, errOut, code := d.cli("exec", name, "--", "touch", "/tmp/go"); code != 0 {
					t.Fatalf("exec in %s: exit %d: %s%s", name, code, out, errOut)
				}
				return time.Now()
			}
			readyByListen := func(name string, since time.Time) {
				t.Helper()
				var at time.Time
				d.waitPod(name, 20*time.Second, func(p *v1.Pod) bool {
					at = time.Now()
					return podReady(p)
				})
				t.Logf("%s: %s Ready %v after its server was told to listen", tc.name, name, at.Sub(since))
				if run := verdictRun(t, d, name, "web", true); run != "listen event" {
					t.Fatalf("%s Ready by a %s run, want its listen's (its period is 30 s)", name, run)
				}
			}

			readyByListen("a", listen("a"))
			// b's namespace has nothing on 8080: a's listen() must not
			// count for it.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if p := d.waitPod("b", 5*time.Second, func(*v1.Pod) bool { return true }); podReady(p) {
					t.Fatalf("b turned Ready with nothing listening in its namespace: %s", describePod(p))
				}
				time.Sleep(100 * time.Millisecond)
			}
			readyByListen("b", listen("b"))
		})
	}
}
