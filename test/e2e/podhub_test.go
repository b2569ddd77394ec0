package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// podhubServer is `podhub serve` with its embedded broker.
type podhubServer struct {
	t       *testing.T
	dataDir string
	addr    string
	cmd     *exec.Cmd
	log     *bytes.Buffer
	// revokedDir is a revoked device's bundle (the Mosquitto test's).
	revokedDir string
	// serveArgs follow podhub serve's own.
	serveArgs []string
}

func podhubBinary() string { return filepath.Join(filepath.Dir(binary), "podhub") }

// newPodhub inits and serves a hub; serveArgs follow serve's own.
func newPodhub(t *testing.T, serveArgs ...string) *podhubServer {
	h := &podhubServer{t: t, dataDir: filepath.Join(t.TempDir(), "hub"), addr: freeLoopback(t), serveArgs: serveArgs}
	if out, code := h.cli("init"); code != 0 || !strings.Contains(out, "hub.pub") {
		t.Fatalf("podhub init: %d %s", code, out)
	}
	h.start()
	t.Cleanup(h.stop)
	return h
}

// enrol issues a device's credentials with podhub device add and returns
// the bundle's directory and its podvisor config (a hub: section).
// hostCommandsAsRoot, appended to an enrolled device's hub section, lets
// the hub run process pods as root, as the tests' pods do.
const hostCommandsAsRoot = "  allowProcessPods: true\n  allowRootProcessPods: true\n"

// deviceStatus is the STATUS column of device id's row in podhub get
// devices, or "" when it is not listed.
func deviceStatus(getDevices, id string) string {
	for _, line := range strings.Split(getDevices, "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[0] == id {
			return f[1]
		}
	}
	return ""
}

func (h *podhubServer) enrol(t *testing.T, id string) (string, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), id)
	out, code := h.cli("device", "add", id, "--out", dir, "--install-dir", dir, "--url", "mqtts://"+h.addr)
	if code != 0 || !strings.Contains(out, "deviceId: "+id) {
		t.Fatalf("podhub device add %s: %d %s", id, code, out)
	}
	cfg, err := os.ReadFile(filepath.Join(dir, "podvisor.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, string(cfg)
}

func (h *podhubServer) start() {
	if err := h.tryStart(); err != nil {
		h.t.Fatal(err)
	}
}

// tryStart starts podhub serve and waits up to 30 s for its API; unlike
// start, it may run outside the test's goroutine.
func (h *podhubServer) tryStart() error {
	h.cmd = exec.Command(podhubBinary(), append([]string{"--data-dir", h.dataDir, "serve", "--mqtt-listen", h.addr}, h.serveArgs...)...)
	return h.tryStartCmd(30 * time.Second)
}

// startCmd starts h.cmd and waits for the API.
func (h *podhubServer) startCmd() {
	if err := h.tryStartCmd(10 * time.Second); err != nil {
		h.t.Fatal(err)
	}
}

func (h *podhubServer) tryStartCmd(within time.Duration) error {
	h.log = &bytes.Buffer{}
	h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
	if err := h.cmd.Start(); err != nil {
		return err
	}
	for deadline := time.Now().Add(within); ; time.Sleep(50 * time.Millisecond) {
		if _, code := h.cli("get", "devices"); code == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("podhub did not serve its API within %s:\n%s", within, h.log)
		}
	}
}

func (h *podhubServer) stop() {
	if h.cmd == nil {
		return
	}
	h.cmd.Process.Signal(syscall.SIGTERM)
	h.cmd.Wait()
	h.cmd = nil
	if h.t.Failed() {
		h.t.Logf("podhub log:\n%s", h.log)
	}
}

func (h *podhubServer) cli(args ...string) (string, int) {
	cmd := exec.Command(podhubBinary(), append([]string{"--data-dir", h.dataDir}, args...)...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	return string(out), code
}

func (h *podhubServer) pods(t *testing.T, device string) map[string]v1.Pod {
	out, code := h.cli("get", "pods", "--device", device, "-o", "json")
	if code != 0 {
		t.Fatalf("podhub get pods: %s", out)
	}
	var list v1.PodList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("podhub get pods -o json: %v\n%s", err, out)
	}
	m := map[string]v1.Pod{}
	for _, p := range list.Items {
		m[p.Name] = p
	}
	return m
}

// The CLI contract end to end: podhub init and serve with the embedded
// broker; a device enrolled with podhub device add, started with the
// config it printed; apply
// by selector, get devices and pods, describe, delete; a silent device
// is NotReady with pods Unknown and nothing started elsewhere; the hub
// restarted keeps the fleet.
func TestPodhubFleet(t *testing.T) {
	h := newPodhub(t)
	// The operator enrols the device (labelling adds it): the hub believes
	// reports only from devices it knows, and a device's own labels only
	// under device.podvisor.io/.
	if out, code := h.cli("label", "device", "gw-7", "site=plant-2", "tier=edge"); code != 0 {
		t.Fatalf("label: %s", out)
	}
	d := newDaemon(t)
	_, hubConfig := h.enrol(t, "gw-7")
	d.withConfig(hubConfig + "  labels: {device.podvisor.io/model: gw100, model: dropped}\n" + hostCommandsAsRoot)
	d.write("local.yaml", processPod("local", "Always", 1, "exec sleep 1000"))
	d.start()
	waitForLong(t, 20*time.Second, "gw-7 Ready at the hub, with the labels it reports", func() bool {
		out, _ := h.cli("get", "devices")
		return strings.Contains(out, "gw-7") && strings.Contains(out, "Ready") && !strings.Contains(out, "NotReady") &&
			strings.Contains(out, "device.podvisor.io/model=gw100") && !strings.Contains(out, " model=")
	})
	manifest := filepath.Join(t.TempDir(), "app.yaml")
	os.WriteFile(manifest, []byte(processPod("app", "Always", 1, "exec sleep 1003")), 0o644)
	if out, code := h.cli("apply", "-f", manifest, "--selector", "site=plant-2"); code != 0 || !strings.Contains(out, "device/gw-7") {
		t.Fatalf("apply: %d %s", code, out)
	}
	d.waitPod("app", 20*time.Second, running)
	waitForLong(t, 20*time.Second, "app mirrored Running", func() bool {
		p, ok := h.pods(t, "gw-7")["app"]
		return ok && running(&p) && p.Annotations["podvisor.io/device"] == "gw-7"
	})
	out, _ := h.cli("get", "pods", "-A")
	if !strings.Contains(out, "gw-7") || !strings.Contains(out, "local") || !strings.Contains(out, "app") {
		t.Fatalf("get pods -A:\n%s", out)
	}
	out, _ = h.cli("describe", "device", "gw-7")
	for _, want := range []string{"Observed:  generation 1", "site=plant-2", "Pod default/app:", "accepted"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), strings.Join(strings.Fields(want), " ")) {
			t.Fatalf("describe lacks %q:\n%s", want, out)
		}
	}
	waitForLong(t, 20*time.Second, "describe device gw-7 naming the pod (default/app) of its event 'Started container main'", func() bool {
		out, _ := h.cli("describe", "device", "gw-7")
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "default/app") && strings.Contains(l, "Started container main") {
				return true
			}
		}
		return false
	})
	// Bad input is refused at the hub, naming the file and field.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containerz: []}\n"), 0o644)
	if out, code := h.cli("apply", "-f", bad, "--device", "gw-7"); code == 0 || !strings.Contains(out, "bad.yaml") || !strings.Contains(out, "containerz") {
		t.Fatalf("a bad manifest: %d %s", code, out)
	}

	// The hub restarts: it keeps the fleet, and the device reconnects.
	h.stop()
	h.start()
	waitForLong(t, 30*time.Second, "gw-7 back", func() bool {
		out, _ := h.cli("get", "devices")
		return strings.Contains(out, "gw-7") && !strings.Contains(out, "NotReady")
	})

	// The device goes silent: NotReady, its pods Unknown; nothing else
	// starts them.
	d.stop(syscall.SIGKILL)
	waitForLong(t, 20*time.Second, "gw-7 NotReady", func() bool {
		out, _ := h.cli("get", "devices")
		return strings.Contains(out, "NotReady")
	})
	if p := h.pods(t, "gw-7")["app"]; p.Status.Phase != v1.PodUnknown {
		t.Fatalf("a silent device's pod is %s, want Unknown", p.Status.Phase)
	}
	out, _ = h.cli("get", "pods", "-A")
	if !strings.Contains(out, "Unknown") {
		t.Fatalf("get pods -A for a silent device:\n%s", out)
	}

	// Back, and the pod deleted at the hub stops on the device.
	d.start()
	d.waitPod("app", 20*time.Second, running)
	if out, code := h.cli("delete", "pod", "app", "--device", "gw-7"); code != 0 {
		t.Fatalf("delete: %s", out)
	}
	d.waitGone("app", 30*time.Second)
	waitForLong(t, 20*time.Second, "app gone at the hub", func() bool {
		_, ok := h.pods(t, "gw-7")["app"]
		return !ok
	})
}
