package e2e

import (
	"bufio"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/podvisor/podvisor/test/prereq"
)

// kubectlBinaries are the kubectls test/kubectl's scripts build or fetch
// (kubectl 1.37 from the module proxy, Debian's 1.20), by name.
func kubectlBinaries(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for name, script := range map[string]string{"v1.37": "build.sh", "debian-1.20": "debian.sh"} {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
		path, err := exec.CommandContext(ctx, "sh", filepath.Join("..", "kubectl", script)).Output()
		cancel()
		if p := strings.TrimSpace(string(path)); err == nil && p != "" {
			out[name] = p
			continue
		}
		prereq.Missing(t, "kubectl %s (test/kubectl/%s: %v)", name, script, err)
	}
	return out
}

// kubectl against podhub serve's Kubernetes API, as an operator uses it:
// a real device is a node, the pod the hub gave it (podhub apply --device:
// the device's own, shown as the kubelet's mirror pod talker-gw-kube) is
// listed with kubectl's wide columns, described with its events, its log
// read through the hub's remote logs (MQTT to the device and back), and a
// watch sees a pod the hub sends later. Both kubectls, through the kubeconfig podhub token
// create writes.
func TestKubectlAgainstPodhub(t *testing.T) {
	kubectls := kubectlBinaries(t)
	addr := freeLoopback(t)
	h := newPodhub(t, "--http-listen", addr)
	kc := filepath.Join(t.TempDir(), "ops.kubeconfig")
	if out, code := h.cli("token", "create", "ops", "--kubeconfig", kc, "--server", "https://"+addr); code != 0 {
		t.Fatalf("podhub token create: %s", out)
	}
	_, cfg := h.enrol(t, "gw-kube")
	d := newDaemon(t)
	d.withConfig(cfg + hostCommandsAsRoot)
	d.start()
	waitForLong(t, 20*time.Second, "gw-kube Ready at the hub", func() bool {
		out, _ := h.cli("get", "devices")
		return deviceStatus(out, "gw-kube") == "Ready"
	})
	manifest := filepath.Join(t.TempDir(), "talker.yaml")
	os.WriteFile(manifest, []byte(talkerPod("talker", filepath.Join(t.TempDir(), "say"))), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--device", "gw-kube"); code != 0 {
		t.Fatalf("apply: %s", out)
	}
	d.waitPod("talker", 20*time.Second, running)

	n := 0
	for name, bin := range kubectls {
		kubectl := func(args ...string) (string, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", kc}, args...)...).CombinedOutput()
			return string(out), err
		}
		t.Run(name, func(t *testing.T) {
			var last string
			defer func() {
				if t.Failed() {
					t.Logf("kubectl get nodes,pods -A -o wide, last answer:\n%s", last)
				}
			}()
			waitForLong(t, 20*time.Second, "kubectl get nodes,pods -A -o wide listing gw-kube Ready and talker Running on it", func() bool {
				out, err := kubectl("get", "nodes,pods", "-A", "-o", "wide")
				last = out
				return err == nil && lineHas(out, "node/gw-kube", "Ready") && lineHas(out, "pod/talker-gw-kube", "1/1", "Running", "gw-kube")
			})
			if out, err := kubectl("logs", "talker-gw-kube"); err != nil || !strings.HasPrefix(out, "hello 1\nhello 2\nhello 3\n") {
				t.Errorf("kubectl logs talker-gw-kube (through the hub to the device): %v %q", err, out)
			}
			// The pod's events are found (kubectl looks a mirror pod's up
			// by its config hash): the Started row under Events.
			if out, err := kubectl("describe", "pod", "talker-gw-kube"); err != nil || !strings.Contains(out, "Node:") ||
				!strings.Contains(out, "gw-kube") || !lineHas(eventsOf(out), "Normal", "Started") {
				t.Errorf("kubectl describe pod talker-gw-kube: %v\n%s", err, out)
			}
			if out, err := kubectl("describe", "node", "gw-kube"); err != nil || !strings.Contains(out, "Conditions:") || !strings.Contains(out, "talker") {
				t.Errorf("kubectl describe node gw-kube: %v\n%s", err, out)
			}

			// A watch sees a pod the hub sends after it started.
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := exec.CommandContext(ctx, bin, "--kubeconfig", kc, "get", "pods", "-A", "-w")
			r, pw := io.Pipe()
			w.Stdout, w.Stderr = pw, pw
			if err := w.Start(); err != nil {
				t.Fatal(err)
			}
			var mu sync.Mutex
			var seen strings.Builder
			go func() {
				s := bufio.NewScanner(r)
				for s.Scan() {
					mu.Lock()
					seen.WriteString(s.Text() + "\n")
					mu.Unlock()
				}
			}()
			defer func() { cancel(); w.Wait(); pw.Close() }()
			text := func() string { mu.Lock(); defer mu.Unlock(); return seen.String() }
			waitForLong(t, 20*time.Second, "kubectl get pods -A -w listing talker", func() bool { return strings.Contains(text(), "talker-gw-kube") })
			n++
			pod := "later-" + strings.ReplaceAll(strings.ToLower(name), ".", "")
			later := filepath.Join(t.TempDir(), pod+".yaml")
			os.WriteFile(later, []byte(processPod(pod, "Always", 1, "sleep 600")), 0o644)
			if out, code := h.cli("apply", "-f", later, "--device", "gw-kube"); code != 0 {
				t.Fatalf("apply: %s", out)
			}
			waitForLong(t, 30*time.Second, "kubectl get pods -A -w showing "+pod+"-gw-kube Running", func() bool {
				return lineHas(text(), pod+"-gw-kube", "Running")
			})
		})
	}
	if n == 0 && len(kubectls) > 0 {
		t.Fatal("no kubectl watch ran")
	}
}

// lineHas says whether one line of out holds every field.
func lineHas(out string, fields ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		all := true
		for _, want := range fields {
			found := false
			for _, x := range f {
				if x == want {
					found = true
					break
				}
			}
			if !found {
				all = false
				break
			}
		}
		if all {
			return true
		}
	}
	return false
}

// eventsOf is the Events section of kubectl describe's output.
func eventsOf(describe string) string {
	_, events, _ := strings.Cut(describe, "\nEvents:")
	return events
}
