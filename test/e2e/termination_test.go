package e2e

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// allTerminated is true once every container of the pod has ended.
func allTerminated(n int) func(p *v1.Pod) bool {
	return func(p *v1.Pod) bool {
		if len(p.Status.ContainerStatuses) != n {
			return false
		}
		for _, c := range p.Status.ContainerStatuses {
			if c.State.Terminated == nil {
				return false
			}
		}
		return true
	}
}

// checkMessages compares each container's state.terminated.message with
// the kubelet's value.
func checkMessages(t *testing.T, p *v1.Pod, want map[string]string) {
	t.Helper()
	for name, msg := range want {
		term := statusOf(p, name).State.Terminated
		if term == nil {
			t.Errorf("container %s has not terminated: %s", name, describePod(p))
			continue
		}
		if term.Message != msg {
			t.Errorf("container %s (exit %d): terminated.message %q, want %q", name, term.ExitCode, term.Message, msg)
		}
	}
}

// The node e2e runtime tests' termination messages ("should report
// termination message ..."), with process pods: the container writes the
// file named by $TERMINATION_MESSAGE_PATH (process pods share the host's
// file system, where /dev/termination-log would be one file for all).
// Also the downward API's plural IP fields and resources as env vars.
func TestTerminationMessageProcessPods(t *testing.T) {
	requireRoot(t) // runAsUser
	d := newDaemon(t)
	d.start()
	d.write("msg.yaml", `apiVersion: v1
kind: Pod
metadata: {name: msg}
spec:
  runtimeClassName: process
  restartPolicy: Never
  containers:
  - name: file
    image: host
    command: ["sh", "-c", "echo -n DONE > \"$TERMINATION_MESSAGE_PATH\""]
  - name: nonroot
    image: host
    securityContext: {runAsUser: 1000, runAsGroup: 1000}
    terminationMessagePath: /dev/termination-custom-log
    command: ["sh", "-c", "echo -n DONE > \"$TERMINATION_MESSAGE_PATH\""]
  - name: fallback
    image: host
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo -n DONE; exit 1"]
  - name: succeeds
    image: host
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo -n DONE; true"]
  - name: filewins
    image: host
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo -n OK > \"$TERMINATION_MESSAGE_PATH\"; echo DONE; exit 3"]
  - name: downward
    image: host
    resources: {limits: {cpu: 1250m, memory: 64Mi}, requests: {cpu: 250m, memory: 32Mi}}
    env:
    - {name: POD_IPS, valueFrom: {fieldRef: {fieldPath: status.podIPs}}}
    - {name: HOST_IPS, valueFrom: {fieldRef: {fieldPath: status.hostIPs}}}
    - {name: CPU_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
    - {name: MEMORY_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory}}}
    - {name: CPU_REQUEST, valueFrom: {resourceFieldRef: {resource: requests.cpu, divisor: 1m}}}
    - {name: MEMORY_REQUEST, valueFrom: {resourceFieldRef: {resource: requests.memory, divisor: 1Mi}}}
    command: ["sh", "-c", "echo $POD_IPS $HOST_IPS $CPU_LIMIT $MEMORY_LIMIT $CPU_REQUEST $MEMORY_REQUEST"]
  - name: nolimits
    image: host
    env:
    - {name: CPU_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
    - {name: MEMORY_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory}}}
    command: ["sh", "-c", "echo $CPU_LIMIT $MEMORY_LIMIT"]
`)
	p := d.waitPod("msg", 30*time.Second, allTerminated(7))
	checkMessages(t, p, map[string]string{"file": "DONE", "nonroot": "DONE", "fallback": "DONE", "succeeds": "", "filewins": "OK"})

	ip := p.Status.HostIP
	out, _, _ := d.cli("logs", "msg", "-c", "downward")
	if want := ip + " " + ip + " 2 67108864 250 32\n"; out != want {
		t.Errorf("downward API env: %q, want %q", out, want)
	}
	// No limit: the node's allocatable amount (a positive number).
	out, _, _ = d.cli("logs", "msg", "-c", "nolimits")
	if !regexp.MustCompile(`^[1-9][0-9]* [1-9][0-9]*\n$`).MatchString(out) {
		t.Errorf("limits from node allocatable: %q", out)
	}
}

// The same on containerd, where the kubelet binds a file at the
// container's terminationMessagePath; plus the containerd behaviours of
// issue 13: the last log line without a newline is kept, a long pod name
// gets the kubelet's truncated hostname, /etc/hosts has the kubelet's
// header unless the container mounts its own, imageID is the image's repo
// digest, and the downward API gives resources.
func TestTerminationMessageContainerd(t *testing.T) {
	d, ctrd := ctrdDaemon(t)
	name := strings.Repeat("a", 62) + "-bcd" // 66 characters: cut to 63, the '-' dropped
	d.write("msg.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  volumes:
  - name: info
    downwardAPI:
      items:
      - {path: hosts, fieldRef: {fieldPath: metadata.uid}}
      - {path: mem, resourceFieldRef: {containerName: downward, resource: limits.memory, divisor: 1Mi}}
  containers:
  - name: file
    image: %[2]s
    imagePullPolicy: Never
    securityContext: {runAsUser: 0}
    command: ["sh", "-c", "echo -n DONE > /dev/termination-log"]
  - name: nonroot
    image: %[2]s
    imagePullPolicy: Never
    securityContext: {runAsUser: 1000}
    terminationMessagePath: /dev/termination-custom-log
    command: ["sh", "-c", "echo -n DONE > /dev/termination-custom-log"]
  - name: fallback
    image: %[2]s
    imagePullPolicy: Never
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo -n DONE; exit 1"]
  - name: succeeds
    image: %[2]s
    imagePullPolicy: Never
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo -n DONE; true"]
  - name: filewins
    image: %[2]s
    imagePullPolicy: Never
    terminationMessagePolicy: FallbackToLogsOnError
    command: ["sh", "-c", "echo -n OK > /dev/termination-log; echo DONE; true"]
  - name: hosts
    image: %[2]s
    imagePullPolicy: Never
    command: ["sh", "-c", "hostname; head -1 /etc/hosts; echo -n $HOSTNAME"]
  - name: ownhosts
    image: %[2]s
    imagePullPolicy: Never
    volumeMounts: [{name: info, mountPath: /etc/hosts, subPath: hosts}]
    command: ["sh", "-c", "cat /etc/hosts"]
  - name: downward
    image: %[2]s
    imagePullPolicy: Never
    resources: {limits: {cpu: 1250m, memory: 64Mi}}
    volumeMounts: [{name: info, mountPath: /etc/podinfo}]
    env:
    - {name: POD_IPS, valueFrom: {fieldRef: {fieldPath: status.podIPs}}}
    - {name: HOST_IPS, valueFrom: {fieldRef: {fieldPath: status.hostIPs}}}
    - {name: CPU_LIMIT, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
    - {name: MEMORY_REQUEST, valueFrom: {resourceFieldRef: {resource: requests.memory}}}
    command: ["sh", "-c", "echo $POD_IPS $HOST_IPS $CPU_LIMIT $MEMORY_REQUEST $(cat /etc/podinfo/mem)"]
`, name, testImage))
	p := d.waitPod(name, 60*time.Second, allTerminated(8))
	checkMessages(t, p, map[string]string{"file": "DONE", "nonroot": "DONE", "fallback": "DONE", "succeeds": "", "filewins": "OK"})

	// Logs lose nothing: a last line without a newline included.
	for c, want := range map[string]string{"fallback": "DONE", "succeeds": "DONE", "filewins": "DONE\n",
		"hosts": name[:62] + "\n# Kubernetes-managed hosts file.\n" + name[:62]} {
		if out, _, _ := d.cli("logs", name, "-c", c); out != want {
			t.Errorf("logs of %s: %q, want %q", c, out, want)
		}
	}
	if out, _, _ := d.cli("logs", name, "-c", "ownhosts"); out != string(p.UID) {
		t.Errorf("a container mounting its own /etc/hosts sees %q, want its own file (%q)", out, p.UID)
	}
	out, _, _ := d.cli("logs", name, "-c", "downward")
	if want := fmt.Sprintf("%s %s 1250 67108864 64\n", p.Status.PodIP, p.Status.HostIP); out != want {
		t.Errorf("downward API: %q, want %q", out, want)
	}

	// imageID: the repo digest of the image, as the CRI's ImageRef.
	ls, err := exec.Command("ctr", "-a", ctrd.Address, "-n", "podvisor", "images", "ls").Output()
	if err != nil {
		t.Fatalf("ctr images ls: %v", err)
	}
	digest := regexp.MustCompile(regexp.QuoteMeta(testImage) + `\s+\S+\s+(sha256:[0-9a-f]{64})`).FindStringSubmatch(string(ls))
	if digest == nil {
		t.Fatalf("no digest for %s in:\n%s", testImage, ls)
	}
	want := strings.Split(testImage, ":")[0] + "@" + digest[1]
	for _, c := range p.Status.ContainerStatuses {
		if c.ImageID != want {
			t.Errorf("container %s: imageID %q, want %q", c.Name, c.ImageID, want)
		}
	}

	// Removal leaves no termination message file behind.
	d.remove("msg.yaml")
	d.waitGone(name, 30*time.Second)
	waitForLong(t, 10*time.Second, "containerd's containers to be removed", func() bool { return len(ctrContainers(t, ctrd)) == 0 })
	files, _ := exec.Command("sh", "-c", "ls -A "+d.data+"/termination 2>/dev/null").Output()
	if len(files) != 0 {
		t.Errorf("termination message files left: %s", files)
	}
}

// An httpGet probe redirected to another host succeeds without going
// there, and the pod gets the kubelet's ProbeWarning event (node e2e
// container_probe.go: "should *not* be restarted with a non-local
// redirect http liveness probe").
func TestProbeRedirectToAnotherHost(t *testing.T) {
	var elsewhere atomic.Int32
	other, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		prerequisite(t, "a second loopback address (127.0.0.2): %v", err)
	}
	otherSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
	}))
	otherSrv.Listener.Close()
	otherSrv.Listener = other
	otherSrv.Start()
	defer otherSrv.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/healthz":
		case "/redirect":
			http.Redirect(w, r, r.URL.Query().Get("loc"), http.StatusFound)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	otherURL := "http://" + other.Addr().String() + "/"

	d := newDaemon(t)
	d.start()
	d.write("redirect.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: redirect}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: ["sleep", "1000"]
    livenessProbe:
      httpGet: {path: "/redirect?loc=%[2]s", port: %[1]s}
      periodSeconds: 1
      timeoutSeconds: 5
      failureThreshold: 1
    readinessProbe:
      httpGet: {path: "/redirect?loc=%%2Fhealthz", port: %[1]s}
      periodSeconds: 1
`, port, strings.ReplaceAll(otherURL, "/", "%2F")))
	d.waitPod("redirect", 20*time.Second, func(p *v1.Pod) bool {
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].Ready
	})
	var describe string
	waitForLong(t, 10*time.Second, "a ProbeWarning event in describe pod redirect", func() bool {
		describe, _, _ = d.cli("describe", "pod", "redirect")
		return strings.Contains(describe, "ProbeWarning") &&
			strings.Contains(describe, "Liveness probe warning: Probe terminated redirects")
	})
	time.Sleep(3 * time.Second) // three more liveness periods
	p := d.waitPod("redirect", 5*time.Second, running)
	if rc := p.Status.ContainerStatuses[0].RestartCount; rc != 0 {
		t.Fatalf("restartCount %d: a redirect elsewhere must count as success", rc)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Fatalf("the daemon followed the redirect to %s %d times", otherURL, n)
	}
	if n := strings.Count(describe, "ProbeWarning"); n != 1 {
		t.Errorf("%d ProbeWarning rows, want one (a warning that repeats is reported once):\n%s", n, describe)
	}
	d.remove("redirect.yaml")
	d.waitGone("redirect", 20*time.Second)
}

// subPathExpr, as the node e2e expansion tests use it: expanded from the
// container's env vars (the downward API's pod name here); a value that
// steps out of the volume leaves the container waiting with
// CreateContainerConfigError and the kubelet's message.
func TestContainerdSubPathExpr(t *testing.T) {
	d, _ := ctrdDaemon(t)
	pod := func(name, value string) string {
		return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  restartPolicy: Never
  volumes: [{name: workdir1, emptyDir: {}}]
  containers:
  - name: app
    image: %s
    imagePullPolicy: Never
    env:
    - {name: POD_NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: SUB, value: "%s"}
    volumeMounts:
    - {name: workdir1, mountPath: /logscontainer, subPathExpr: "$(SUB)"}
    - {name: workdir1, mountPath: /testcontainer}
    command: ["sh", "-c", "test -d /testcontainer/$SUB; echo $?"]
`, name, testImage, value)
	}
	d.write("expr.yaml", pod("expr", "$(POD_NAME)"))
	d.waitPod("expr", 30*time.Second, allTerminated(1))
	if out, _, _ := d.cli("logs", "expr"); out != "0\n" {
		t.Fatalf("subPathExpr $(POD_NAME): test -d printed %q, want 0", out)
	}
	d.write("up.yaml", pod("up", ".."))
	p := d.waitPod("up", 30*time.Second, func(p *v1.Pod) bool {
		w := p.Status.ContainerStatuses[0].State.Waiting
		return w != nil && w.Reason == "CreateContainerConfigError"
	})
	if msg := p.Status.ContainerStatuses[0].State.Waiting.Message; !strings.Contains(msg, "unable to provision SubPath `..`: must not contain '..'") {
		t.Fatalf("waiting message %q", msg)
	}
	for _, name := range []string{"expr", "up"} {
		d.remove(name + ".yaml")
		d.waitGone(name, 30*time.Second)
	}
}
