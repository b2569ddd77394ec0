package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/protocol"
)

// hubDevice starts a daemon connected to the rig as device id, with more
// settings for its hub section (", allowProcessPods: true").
func hubDevice(t *testing.T, r *fleetRig, id, hubSettings string) *daemon {
	d := newDaemon(t)
	d.withConfig(fmt.Sprintf("hub: {url: mqtt://%s, deviceId: %s, key: %s%s}\n", r.addr, id, r.pubFile, hubSettings))
	d.extraArgs = []string{"--stop-pods-on-exit"}
	startStopping(d)
	return d
}

// startStopping starts the daemon, and stops it and its pods when the
// test ends, before its cgroups are removed: nothing is left running.
func startStopping(d *daemon) {
	d.start()
	d.t.Cleanup(func() { d.stop(syscall.SIGTERM) })
}

// ackOf waits until the hub holds the device's ack of generation gen.
func ackOf(t *testing.T, r *fleetRig, device string, gen int64) *protocol.Ack {
	t.Helper()
	var a *protocol.Ack
	waitForLong(t, 30*time.Second, fmt.Sprintf("%s's ack of generation %d at the hub", device, gen), func() bool {
		a, _ = r.fleet.LastAck(device)
		return a != nil && a.ObservedGeneration >= gen
	})
	return a
}

// verdicts are an ack's per-pod verdicts by name: "" accepted, else the
// reason.
func verdicts(t *testing.T, a *protocol.Ack) map[string]string {
	out := map[string]string{}
	for _, p := range a.Pods {
		if p.Accepted {
			out[p.Name] = ""
		} else if out[p.Name] = p.Reason; p.Reason == "" {
			t.Fatalf("pod %s refused without a reason", p.Name)
		}
	}
	return out
}

// withCommandArg lists the processes whose command line has arg, as the
// host sees them: a refused pod must have started nothing.
func withCommandArg(arg string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		cmdline, err := os.ReadFile(filepath.Join(dir, "cmdline"))
		if err != nil {
			continue
		}
		for _, a := range bytes.Split(cmdline, []byte{0}) {
			if string(a) == arg {
				pid, _ := strconv.Atoi(filepath.Base(dir))
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids
}

// procStatus is a field of /proc/<pid>/status.
func procStatus(t *testing.T, pid int, field string) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return ""
}

// hubProcessPod is a process pod whose one container sleeps for marker
// seconds, a number no other test uses, so the host can look for it;
// extra is indented YAML added to the container.
func hubProcessPod(name string, marker int, podExtra, containerExtra string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
%s  containers:
  - name: main
    image: host
    command: ["sleep", "%d"]
%s`, name, podExtra, marker, containerExtra)
}

// shareTestImage lets hub pods use the side-loaded test image: hub pods
// use only pulled images and those the owner shares. hubSettings are the
// rest of the hub section, on one line.
func shareTestImage(t *testing.T, d *daemon, hubSettings string) {
	t.Helper()
	f, err := os.OpenFile(d.config, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	repo, _, _ := strings.Cut(testImage, ":")
	fmt.Fprintf(f, "hub: {images: {shared: [%s]}%s}\n", repo, hubSettings)
}

// Under the default level (baseline), hub pods that ask for host access
// are refused with the Pod Security Standards rule named in the verdict
// the hub keeps, and start nothing on the host; a pod that asks for
// nothing runs beside them. Process pods are allowed here, even as root,
// so the level alone decides.
func TestHubPodSecurityBaselineRefusesHostAccess(t *testing.T) {
	r := newFleetRig(t)
	d := hubDevice(t, r, "pss-1", ", allowProcessPods: true, allowRootProcessPods: true")
	attacks := map[string]struct {
		pod, want string
	}{
		"hostnet": {hubProcessPod("hostnet", 7311, "  hostNetwork: true\n", ""),
			`violates PodSecurity "baseline:latest": host namespaces (hostNetwork=true)`},
		"hostpid": {hubProcessPod("hostpid", 7312, "  hostPID: true\n", ""), "host namespaces (hostPID=true)"},
		"caps": {hubProcessPod("caps", 7313, "", "    securityContext: {capabilities: {add: [SYS_ADMIN, SYS_MODULE, NET_ADMIN]}}\n"),
			`non-default capabilities (container "main" must not include "NET_ADMIN", "SYS_ADMIN", "SYS_MODULE" in securityContext.capabilities.add)`},
		"privileged": {hubProcessPod("privileged", 7314, "", "    securityContext: {privileged: true}\n"),
			`privileged (container "main" must not set securityContext.privileged=true)`},
		"unconfined": {hubProcessPod("unconfined", 7315, "  securityContext: {seccompProfile: {type: Unconfined}}\n", ""),
			`seccompProfile (pod must not set securityContext.seccompProfile.type to "Unconfined")`},
	}
	manifests := []string{hubProcessPod("fine", 7310, "", "")}
	for _, a := range attacks {
		manifests = append(manifests, a.pod)
	}
	r.apply(t, "pss-1", manifests...)
	got := verdicts(t, ackOf(t, r, "pss-1", 1))
	for name, a := range attacks {
		if !strings.Contains(got[name], a.want) || !strings.Contains(got[name], "hub.podSecurity") {
			t.Errorf("%s: verdict %q, want a refusal saying %q", name, got[name], a.want)
		}
	}
	if got["fine"] != "" {
		t.Fatalf("the harmless pod was refused: %s", got["fine"])
	}
	d.waitPod("fine", 20*time.Second, running)
	for marker := 7311; marker <= 7315; marker++ {
		if pids := withCommandArg(strconv.Itoa(marker)); len(pids) > 0 {
			t.Errorf("a refused pod runs on the host: sleep %d, pids %v", marker, pids)
		}
	}
	out, _, _ := d.cli("get", "pods", "-A")
	for name := range attacks {
		if strings.Contains(out, name) {
			t.Errorf("refused pod %s is listed on the device:\n%s", name, out)
		}
	}
}

// The same attacks on containerd pods, with a hostPath of the host's /:
// refused, and no container made for them.
func TestHubPodSecurityBaselineContainerd(t *testing.T) {
	r := newFleetRig(t)
	d, ctrd := ctrdDaemon(t)
	// Again, now connected to the hub (ctrdDaemon starts it without).
	d.stop(syscall.SIGTERM)
	d.extraArgs = []string{"--hub", "mqtt://" + r.addr, "--device-id", "pss-ctrd", "--hub-key", r.pubFile, "--stop-pods-on-exit"}
	shareTestImage(t, d, "")
	startStopping(d)
	pod := func(name string, marker int, podExtra, containerExtra string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: %s
spec:
  terminationGracePeriodSeconds: 1
%s  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: ["sleep", "%d"]
%s`, name, podExtra, testImage, marker, containerExtra)
	}
	attacks := map[string]struct {
		pod, want string
	}{
		"hostnet": {pod("hostnet", 7321, "  hostNetwork: true\n", ""), "host namespaces (hostNetwork=true)"},
		"sysadmin": {pod("sysadmin", 7322, "", "    securityContext: {capabilities: {add: [SYS_ADMIN]}}\n"),
			`non-default capabilities (container "main" must not include "SYS_ADMIN" in securityContext.capabilities.add)`},
		"hostroot": {pod("hostroot", 7323, "  volumes: [{name: root, hostPath: {path: /}}]\n", "    volumeMounts: [{name: root, mountPath: /host}]\n"),
			`hostPath volumes (volume "root")`},
		"unconfined": {pod("unconfined", 7324, "", "    securityContext: {runAsUser: 0, seccompProfile: {type: Unconfined}, appArmorProfile: {type: Unconfined}}\n"),
			`seccompProfile (container "main" must not set securityContext.seccompProfile.type to "Unconfined")`},
	}
	manifests := []string{pod("fine", 7320, "", "")}
	for _, a := range attacks {
		manifests = append(manifests, a.pod)
	}
	r.apply(t, "pss-ctrd", manifests...)
	got := verdicts(t, ackOf(t, r, "pss-ctrd", 1))
	for name, a := range attacks {
		if !strings.Contains(got[name], `violates PodSecurity "baseline:latest"`) || !strings.Contains(got[name], a.want) {
			t.Errorf("%s: verdict %q, want a refusal saying %q", name, got[name], a.want)
		}
	}
	if !strings.Contains(got["unconfined"], "forbidden AppArmor profile") {
		t.Errorf("unconfined: verdict %q does not name AppArmor", got["unconfined"])
	}
	if got["fine"] != "" {
		t.Fatalf("the harmless pod was refused: %s", got["fine"])
	}
	d.waitPod("fine", 60*time.Second, running)
	if cs := ctrContainers(t, ctrd); len(cs) != 1 {
		t.Errorf("containers %v, want only the harmless pod's", cs)
	}
	for marker := 7321; marker <= 7324; marker++ {
		if pids := withCommandArg(strconv.Itoa(marker)); len(pids) > 0 {
			t.Errorf("a refused pod runs on the host: sleep %d, pids %v", marker, pids)
		}
	}
}

// A hub process pod that would run as root is refused by default (no
// process pods from the hub at all), and where process pods are allowed
// (not as root); nothing runs. The same pod as the device's own
// manifest file runs: the device trusts its own files. The refusal is
// what podhub describe shows.
func TestHubProcessPodAsRootRefused(t *testing.T) {
	requireRoot(t)
	h := newPodhub(t)
	proof := filepath.Join(t.TempDir(), "shadow-copy")
	shadow := fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: shadow
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sh", "-c", "cat /etc/shadow > %s; exec sleep 7331"]
`, proof)
	manifest := filepath.Join(t.TempDir(), "shadow.yaml")
	os.WriteFile(manifest, []byte(shadow), 0o644)
	device := func(id, hubSettings string) *daemon {
		d := newDaemon(t)
		_, enrolled := h.enrol(t, id)
		d.extraArgs = []string{"--stop-pods-on-exit"}
		d.withConfig(enrolled + hubSettings)
		startStopping(d)
		return d
	}
	refused := func(id string, want ...string) {
		t.Helper()
		if out, code := h.cli("apply", "-f", manifest, "--device", id); code != 0 {
			t.Fatalf("apply: %s", out)
		}
		var out string
		waitForLong(t, 30*time.Second, id+"'s verdict in podhub describe", func() bool {
			out, _ = h.cli("describe", "device", id)
			return strings.Contains(out, "Pod default/shadow:")
		})
		flat := strings.Join(strings.Fields(out), " ")
		for _, w := range want {
			if !strings.Contains(flat, w) {
				t.Fatalf("describe device %s lacks %q:\n%s", id, w, out)
			}
		}
		if pids := withCommandArg("7331"); len(pids) > 0 || exists(proof) {
			t.Fatalf("the refused pod ran on the host: pids %v, %s written: %v", pids, proof, exists(proof))
		}
	}

	strict := device("root-1", "")
	refused("root-1", "rejected: ", "spec.runtimeClassName: process pods (host commands) from the hub are not allowed on this device (hub.allowProcessPods)")
	refused2 := device("root-2", "  allowProcessPods: true\n")
	refused("root-2", "rejected: ", `spec.securityContext.runAsUser: unset, so process container "main" would run as root`, "hub.allowRootProcessPods")
	refused2.stop(syscall.SIGTERM)

	// The device's own file: trusted, it runs as root.
	strict.write("shadow.yaml", shadow)
	strict.waitPod("shadow", 20*time.Second, running)
	waitForLong(t, 10*time.Second, "the file pod's copy of /etc/shadow", func() bool { return exists(proof) })
}

// A hub process pod allowed as a user runs as that user on the host:
// its uid and gid, no capabilities, its supplementalGroups and none of
// the daemon's, and it cannot read /etc/shadow.
func TestHubProcessPodRunsAsItsUser(t *testing.T) {
	requireRoot(t)
	r := newFleetRig(t)
	d := hubDevice(t, r, "user-1", ", allowProcessPods: true")
	r.apply(t, "user-1", hubProcessPod("nobody", 7341, "  securityContext: {runAsUser: 65534, runAsGroup: 65534, supplementalGroups: [44]}\n", ""),
		`apiVersion: v1
kind: Pod
metadata: {name: reader}
spec:
  runtimeClassName: process
  restartPolicy: Never
  securityContext: {runAsUser: 65534}
  containers:
  - name: main
    image: host
    command: ["sh", "-c", "cat /etc/shadow >/dev/null 2>&1 && echo READ || echo DENIED"]
`)
	if got := verdicts(t, ackOf(t, r, "user-1", 1)); got["nobody"] != "" || got["reader"] != "" {
		t.Fatalf("verdicts %v", got)
	}
	d.waitPod("nobody", 20*time.Second, running)
	pids := withCommandArg("7341")
	if len(pids) != 1 {
		t.Fatalf("processes of the pod: %v", pids)
	}
	for field, want := range map[string]string{"Uid": "65534 65534 65534 65534", "Gid": "65534 65534 65534 65534",
		"CapEff": "0000000000000000", "CapPrm": "0000000000000000", "CapAmb": "0000000000000000", "Groups": "44"} {
		if got := procStatus(t, pids[0], field); got != want {
			t.Errorf("/proc/%d/status %s: %q, want %q", pids[0], field, got, want)
		}
	}
	d.waitPod("reader", 20*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodSucceeded })
	if out, _, _ := d.cli("logs", "reader"); out != "DENIED\n" {
		t.Fatalf("reading /etc/shadow as 65534: %q", out)
	}
}
