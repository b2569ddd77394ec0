// Package kubectl runs real Kubernetes clients against the hub's
// Kubernetes API (sync/hub/kubeapi) behind podhub's HTTPS listener
// (sync/hub/gateway) with a bearer token: kubectl v1.37 built from the
// module proxy (build.sh), Debian's kubernetes-client 1.20 (debian.sh),
// k9s built from the module proxy (k9s.sh) in a tmux terminal, and a
// WebSocket watch as Headlamp's server opens one. Without a binary, its
// test skips locally and fails under CI=true.
package kubectl

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apiresource "k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/manifest"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/gateway"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/hub/kubeapi"
	"github.com/podvisor/podvisor/sync/pki"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/prereq"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// kubectls are the binaries to test, built or fetched once per run.
var (
	kubectlsOnce sync.Once
	kubectlsList []kubectlBin
	kubectlsErrs []string
)

type kubectlBin struct{ name, path string }

func kubectls(t *testing.T) []kubectlBin {
	kubectlsOnce.Do(func() {
		for _, s := range []struct{ name, script string }{{"v1.37", "build.sh"}, {"debian-1.20", "debian.sh"}} {
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			out, err := exec.CommandContext(ctx, "sh", s.script).Output()
			cancel()
			path := strings.TrimSpace(string(out))
			if err != nil || path == "" {
				var stderr string
				if ee, ok := err.(*exec.ExitError); ok {
					stderr = string(ee.Stderr)
				}
				kubectlsErrs = append(kubectlsErrs, fmt.Sprintf("%s (test/kubectl/%s): %v %s", s.name, s.script, err, stderr))
				continue
			}
			kubectlsList = append(kubectlsList, kubectlBin{s.name, path})
		}
	})
	for _, e := range kubectlsErrs {
		prereq.Missing(t, "kubectl %s", e)
	}
	return kubectlsList
}

var t0 = time.Now().Add(-time.Second).Truncate(time.Second)

// hub is a fleet of two devices behind the API, on TLS with a token.
type hub struct {
	t          *testing.T
	fleet      *fleetdb.Fleet
	kubeconfig string
	// badKubeconfig has a token the hub never made.
	badKubeconfig string
	cacheDir      string
	seq           map[string]int64
	// addr, token and ca reach the API without kubectl.
	addr  string
	token string
	ca    *pki.CA
}

// fakeLogs stands in for the remote logs (remotelogs) in this test only,
// with the timestamps the device writes when asked (k9s always asks).
type fakeLogs struct{}

func (fakeLogs) PodLogs(ctx context.Context, device, namespace, pod string, opts *v1.PodLogOptions, w io.Writer) error {
	stamp := ""
	if opts.Timestamps {
		stamp = time.Now().UTC().Format(time.RFC3339Nano) + " "
	}
	_, err := fmt.Fprintf(w, "%shello from %s/%s container %s on %s\n", stamp, namespace, pod, opts.Container, device)
	return err
}

func newHub(t *testing.T) *hub {
	dir := t.TempDir()
	fleet, err := fleetdb.Open(filepath.Join(dir, "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	h := &hub{t: t, fleet: fleet, seq: map[string]int64{}, cacheDir: filepath.Join(dir, "cache"),
		kubeconfig: filepath.Join(dir, "kubeconfig")}
	h.device("dev1", map[string]string{"zone": "a", "node-role.kubernetes.io/gateway": "true"})
	h.device("dev2", map[string]string{"zone": "b"})
	h.report("dev1", podItem(filePod("web", 2)), podItem(filePod("db", 0)),
		protocol.StatusItem{Key: "default/web", Event: &protocol.Event{Time: time.Now().Add(-time.Minute), Type: "Warning",
			Reason: "BackOff", Message: "Back-off restarting failed container main in pod web"}})
	h.report("dev2", podItem(filePod("web", 0)))
	pdb := "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: api}\nspec: {minAvailable: 1, selector: {matchLabels: {app: api}}}\n"
	objs, err := kinds.Decode("workloads.yaml", []byte(workloadfile.File(
		workloadfile.Deployment("api", 2, "containers: [{name: api, image: busybox}]"),
		workloadfile.DaemonSet("agent", "containers: [{name: agent, image: busybox}]"),
		workloadfile.PriorityClass("edge-critical", 1000), pdb)))
	must(t, err)
	workloads := workloaddb.New(fleet.SQL())
	must(t, workloads.ApplyObjects(objs, time.Now()))

	api := kubeapi.New(kubeapi.Config{Fleet: fleet, Workloads: workloads, Logs: fakeLogs{},
		Version: "1.4.0-test", Resync: time.Hour})
	t.Cleanup(api.Close)
	// podhub's HTTPS listener: its CA, a server certificate it issued, a
	// token made as podhub token create makes it.
	pkiDir := filepath.Join(dir, "pki")
	_, err = pki.Init(pkiDir, nil)
	must(t, err)
	ca, err := pki.Load(pkiDir)
	must(t, err)
	certPath, keyPath := filepath.Join(pkiDir, pki.HTTPCert), filepath.Join(pkiDir, pki.HTTPKey)
	_, err = ca.EnsureServer(certPath, keyPath, "podhub https", []string{"localhost", "127.0.0.1", "::1"})
	must(t, err)
	pair, err := tls.LoadX509KeyPair(certPath, keyPath)
	must(t, err)
	tokenFile := filepath.Join(dir, "tokens")
	token, err := gateway.CreateToken(tokenFile, "viewer", time.Now())
	must(t, err)
	gw, err := gateway.New(gateway.Config{Listen: "127.0.0.1:0", Cert: pair, CA: ca.Certificate(), PKIDir: pkiDir,
		TokenFile: tokenFile, Kube: api})
	must(t, err)
	served := make(chan error, 1)
	go func() { served <- gw.Serve() }()
	t.Cleanup(func() {
		gw.Close()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("gateway: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("the gateway did not stop within 10s of Close")
		}
	})
	h.addr, h.token, h.ca = gw.Addr().String(), token, ca
	h.badKubeconfig = filepath.Join(dir, "bad-kubeconfig")
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Certificate().Raw})
	for path, tok := range map[string]string{h.kubeconfig: token, h.badKubeconfig: "not-a-token"} {
		must(t, os.WriteFile(path, []byte(kubeconfig("https://"+gw.Addr().String(), caPEM, tok)), 0o600))
	}
	return h
}

// kubeconfig is a kubeconfig for the hub with a token.
func kubeconfig(server string, ca []byte, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: podhub
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: viewer
  user:
    token: %s
contexts:
- name: podhub
  context: {cluster: podhub, user: viewer}
current-context: podhub
`, server, base64.StdEncoding.EncodeToString(ca), token)
}
func (h *hub) device(id string, labels map[string]string) {
	h.t.Helper()
	at := time.Now()
	must(h.t, h.fleet.AddDevice(id))
	must(h.t, h.fleet.SetLabels(id, labels))
	_, err := h.fleet.SavePresence(id, &protocol.Presence{Online: true, Instance: "i-" + id}, at)
	must(h.t, err)
	node := v1.NodeStatus{
		Capacity:    v1.ResourceList{v1.ResourceCPU: apiresource.MustParse("4"), v1.ResourceMemory: apiresource.MustParse("2Gi"), v1.ResourcePods: apiresource.MustParse("110")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: apiresource.MustParse("4"), v1.ResourceMemory: apiresource.MustParse("1900Mi"), v1.ResourcePods: apiresource.MustParse("110")},
		Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady",
			Message: "podvisor is posting ready status", LastHeartbeatTime: metav1.NewTime(at), LastTransitionTime: metav1.NewTime(at.Add(-time.Hour))}},
		Addresses: []v1.NodeAddress{{Type: v1.NodeHostName, Address: id}, {Type: v1.NodeInternalIP, Address: "192.0.2.10"}},
		NodeInfo: v1.NodeSystemInfo{OSImage: "Debian GNU/Linux 12 (bookworm)", KernelVersion: "6.1.0-28-amd64",
			ContainerRuntimeVersion: "podvisor://1.0", KubeletVersion: "v1.37.2-podvisor", OperatingSystem: "linux", Architecture: "amd64"},
	}
	_, _, err = h.fleet.SaveHeartbeat(&protocol.Heartbeat{Device: id, Time: at, Version: "1.0.0", Node: node, Instance: "i-" + id}, at)
	must(h.t, err)
}

func filePod(name string, restarts int32) *v1.Pod {
	start := metav1.NewTime(t0.Add(-10 * time.Minute))
	return &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", UID: types.UID("uid-file-" + name), CreationTimestamp: start,
			Labels: map[string]string{"app": name}, Annotations: map[string]string{manifest.AnnotationSource: manifest.SourceFile,
				// As podvisor reports a manifest file's pod: its config hash
				// (the mirror pod's kubernetes.io/config.mirror) beside its UID.
				manifest.AnnotationHash: "hash-file-" + name}},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main", Image: "busybox"}}},
		Status: v1.PodStatus{Phase: v1.PodRunning, PodIP: "10.88.0.5", StartTime: &start,
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "main", Ready: true, RestartCount: restarts,
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{StartedAt: start}}}}},
	}
}

func podItem(p *v1.Pod) protocol.StatusItem {
	return protocol.StatusItem{Key: p.Namespace + "/" + p.Name, Pod: p}
}

func (h *hub) report(device string, items ...protocol.StatusItem) {
	h.t.Helper()
	after := h.seq[device]
	for i := range items {
		h.seq[device]++
		items[i].Seq = h.seq[device]
	}
	_, err := h.fleet.StoreStatus(&protocol.StatusBatch{Device: device, Epoch: "e1", After: after, Items: items}, time.Now())
	must(h.t, err)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// kubectl runs one command (60 s at most) and returns its output.
func (h *hub) kubectl(t *testing.T, bin kubectlBin, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.path, append([]string{"--kubeconfig", h.kubeconfig, "--cache-dir", h.cacheDir}, args...)...)
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s (%s): %v\n%s", strings.Join(args, " "), bin.name, err, out)
	}
	t.Logf("kubectl %s (%s):\n%s", strings.Join(args, " "), bin.name, out)
	return string(out)
}

func contains(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s: no %q in\n%s", what, w, out)
		}
	}
}

func TestKubectl(t *testing.T) {
	for _, bin := range kubectls(t) {
		t.Run(bin.name, func(t *testing.T) {
			h := newHub(t)
			t.Run("refused without a token the hub made", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				cmd := exec.CommandContext(ctx, bin.path, "--kubeconfig", h.badKubeconfig, "--cache-dir", h.cacheDir, "get", "pods", "-A")
				cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=")
				out, err := cmd.CombinedOutput()
				if err == nil || !strings.Contains(string(out), "Unauthorized") && !strings.Contains(string(out), "You must be logged in to the server") {
					t.Errorf("a bad token: %v\n%s", err, out)
				}
			})
			t.Run("version", func(t *testing.T) {
				contains(t, "version", h.kubectl(t, bin, "version"), "v1.37.2+podhub.1.4.0-test")
			})
			t.Run("get nodes,pods -A -o wide", func(t *testing.T) {
				out := h.kubectl(t, bin, "get", "nodes,pods", "-A", "-o", "wide")
				contains(t, "get -o wide", out, "INTERNAL-IP", "OS-IMAGE", "KERNEL-VERSION", "CONTAINER-RUNTIME",
					"node/dev1", "gateway", "192.0.2.10", "Debian GNU/Linux 12 (bookworm)", "podvisor://1.0",
					"NAMESPACE", "NOMINATED NODE", "READINESS GATES", "pod/web-dev1", "pod/web-dev2", "pod/db-dev1", "10.88.0.5")
			})
			t.Run("describe node", func(t *testing.T) {
				out := h.kubectl(t, bin, "describe", "node", "dev1")
				contains(t, "describe node", out, "Name:", "dev1", "Roles:", "gateway", "zone=a", "Ready", "KubeletReady",
					"Non-terminated Pods:", "web-dev1", "db-dev1", "InternalIP:", "192.0.2.10", "HolderIdentity:", "RenewTime:")
			})
			t.Run("describe pod", func(t *testing.T) {
				out := h.kubectl(t, bin, "describe", "pod", "-n", "default", "web-dev1")
				if strings.Contains(out, "IPs:            <none>") {
					t.Errorf("describe pod shows no IPs")
				}
				contains(t, "describe pod", out, "Node:", "dev1/192.0.2.10", "IPs:", "kubernetes.io/config.source: file", "Controlled By:", "Node/dev1",
					"Events:", "BackOff", "Back-off restarting failed container main in pod web")
			})
			t.Run("logs", func(t *testing.T) {
				out := h.kubectl(t, bin, "logs", "-n", "default", "web-dev2")
				contains(t, "logs", out, "hello from default/web container main on dev2")
			})
			t.Run("get workloads", func(t *testing.T) {
				out := h.kubectl(t, bin, "get", "deployments,daemonsets,priorityclasses,poddisruptionbudgets", "-A")
				contains(t, "get workloads", out, "deployment.apps/api", "0/2", "daemonset.apps/agent",
					"priorityclass.scheduling.k8s.io/edge-critical", "1000", "poddisruptionbudget.policy/api")
				out = h.kubectl(t, bin, "describe", "deployment", "api")
				contains(t, "describe deployment", out, "Name:", "api", "Replicas:", "2 desired")
			})
			t.Run("get pods -A -w", func(t *testing.T) { h.watch(t, bin) })
		})
	}
}

// watch runs kubectl get pods -A -w, waits for its listing, changes a
// pod and waits for kubectl to print the change.
func (h *hub) watch(t *testing.T, bin kubectlBin) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin.path, "--kubeconfig", h.kubeconfig, "--cache-dir", h.cacheDir, "get", "pods", "-A", "-w")
	cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "KUBECONFIG=")
	out, err := cmd.StdoutPipe()
	must(t, err)
	cmd.Stderr = os.Stderr
	must(t, cmd.Start())
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	waitLine := func(what string, match func(string) bool) {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("kubectl -w ended waiting for %s", what)
				}
				t.Logf("kubectl -w: %s", l)
				if match(l) {
					return
				}
			case <-deadline:
				t.Fatalf("waited 20s for kubectl -w to print %s", what)
			}
		}
	}
	waitLine("web-dev2 listed", func(l string) bool { return strings.Contains(l, "web-dev2") })
	start := time.Now()
	h.report("dev2", podItem(filePod("web", 7)))
	waitLine("web-dev2 with 7 restarts", func(l string) bool {
		f := strings.Fields(l)
		return len(f) > 4 && f[1] == "web-dev2" && f[4] == "7"
	})
	t.Logf("kubectl -w (%s) printed the change %v after it was stored", bin.name, time.Since(start).Round(time.Millisecond))
}
