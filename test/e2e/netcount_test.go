package e2e

import (
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	v1 "k8s.io/api/core/v1"
)

const (
	netUpload   = 4 << 20 // bytes the pod sends
	netDownload = 8 << 20 // bytes it receives
)

// A process pod uploads 4 MiB and downloads 8 MiB over loopback TCP:
// `podvisor top pods` shows at least that in NET-OUT and NET-IN, and not
// much more (TCP and IP headers). After a kill -9 and restart of the
// daemon, the adopted pod's cgroup has its counting programs once.
func TestTopPodsShowsNetworkCounters(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("bash"); err != nil {
		prerequisite(t, "bash (its /dev/tcp is the pod's client): %v", err)
	}
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() { served <- serveTransfer(ln) }()

	d := newDaemon(t)
	d.start()
	port := ln.Addr().(*net.TCPAddr).Port
	d.write("talker.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: host
    command: [bash, -c, "exec 3<>/dev/tcp/127.0.0.1/%d; head -c %d /dev/zero >&3; cat <&3 >/dev/null; exec sleep 1000"]
`, port, netUpload))
	d.waitPod("talker", 10*time.Second, running)
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("the transfer with the pod: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("waited 30 s for the pod to upload %d bytes and download %d", netUpload, netDownload)
	}

	row := topRow(t, d, "talker")
	if row[4] == "-" {
		prerequisite(t, "no network counters for the pod (no eBPF here?):\n%s", d.log)
	}
	t.Logf("top pods row: %v", row)
	in, out := mebibytes(t, row[4]), mebibytes(t, row[5])
	if in < netDownload>>20 || in > netDownload>>20+1 || out < netUpload>>20 || out > netUpload>>20+1 {
		t.Fatalf("NET-IN %dMi NET-OUT %dMi, want %dMi and %dMi (+1 for headers): %v", in, out, netDownload>>20, netUpload>>20, row)
	}
	if n := countingPrograms(t, d); n != 2 {
		t.Fatalf("%d counting programs attached under the daemon's cgroups, want 2 (ingress, egress)", n)
	}

	// kill -9, restart: the pod is adopted and counted again, once.
	d.stop(syscall.SIGKILL)
	d.start()
	waitForValue(t, 10*time.Second, "top pods to show the adopted pod's counters (restarted from zero)", func() []string {
		return topRow(t, d, "talker")
	}, func(r []string) bool { return r[4] != "-" && r[5] != "-" })
	if n := countingPrograms(t, d); n != 2 {
		t.Fatalf("%d counting programs attached after kill -9 and restart, want 2", n)
	}
	out2, _, code := d.cli("top", "pods", "--containers")
	if code != 0 || strings.Contains(out2, "NET-IN") {
		t.Fatalf("top pods --containers shows per-pod counters per container or failed:\n%s", out2)
	}
}

// serveTransfer takes one connection, reads netUpload bytes from it,
// writes netDownload bytes and closes it.
func serveTransfer(ln net.Listener) error {
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if n, err := io.CopyN(io.Discard, c, netUpload); err != nil {
		return fmt.Errorf("read %d of %d uploaded bytes: %w", n, netUpload, err)
	}
	if n, err := c.Write(make([]byte, netDownload)); err != nil {
		return fmt.Errorf("wrote %d of %d bytes: %w", n, netDownload, err)
	}
	return nil
}

// topRow is the pod's row of `podvisor top pods`: NAME CPU MEMORY TASKS
// NET-IN NET-OUT.
func topRow(t *testing.T, d *daemon, name string) []string {
	t.Helper()
	out, errOut, code := d.cli("top", "pods")
	if code != 0 {
		t.Fatalf("top pods: %s", errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if h := strings.Fields(lines[0]); len(h) != 6 || h[4] != "NET-IN(bytes)" || h[5] != "NET-OUT(bytes)" {
		t.Fatalf("top pods header: %q", lines[0])
	}
	for _, line := range lines[1:] {
		if f := strings.Fields(line); len(f) == 6 && f[0] == name {
			return f
		}
	}
	t.Fatalf("top pods has no row for %s:\n%s", name, out)
	return nil
}

func mebibytes(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSuffix(s, "Mi"))
	if err != nil || !strings.HasSuffix(s, "Mi") {
		t.Fatalf("%q is not a count of Mi", s)
	}
	return n
}

// countingPrograms counts the cgroup_skb programs named like netcount's
// attached to the daemon's cgroups in the cgroup2 hierarchy.
func countingPrograms(t *testing.T, d *daemon) int {
	t.Helper()
	root := fmt.Sprintf("podvisor-e2e-%d-%s", os.Getpid(), filepath.Base(d.dir)) // as cgroupRoot names it
	mounts := []string{filepath.Join("/sys/fs/cgroup/unified", root), filepath.Join("/sys/fs/cgroup", root)}
	n := 0
	for _, top := range mounts {
		filepath.WalkDir(top, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return nil
			}
			cg, err := os.Open(p)
			if err != nil {
				return nil
			}
			defer cg.Close()
			for _, a := range []ebpf.AttachType{ebpf.AttachCGroupInetIngress, ebpf.AttachCGroupInetEgress} {
				r, err := link.QueryPrograms(link.QueryOptions{Target: int(cg.Fd()), Attach: a})
				if err != nil {
					continue // not a cgroup2 directory
				}
				for _, ap := range r.Programs {
					if prog, err := ebpf.NewProgramFromID(ap.ID); err == nil {
						if info, err := prog.Info(); err == nil && strings.HasPrefix(info.Name, "podvisor_net") {
							n++
						}
						prog.Close()
					}
				}
			}
			return nil
		})
	}
	return n
}

// A containerd pod on the CNI bridge is counted by the host side of its
// veth: the test downloads 4 MiB from it, and `top pods` shows at least
// that in NET-OUT.
func TestContainerdPodCountedByItsVeth(t *testing.T) {
	d, _ := ctrdDaemon(t)
	d.write("seeder.yaml", `apiVersion: v1
kind: Pod
metadata: {name: seeder}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: web
    image: `+testImage+`
    imagePullPolicy: Never
    command: ["sh", "-c", "mkdir /www && head -c `+strconv.Itoa(netUpload)+` /dev/zero > /www/blob && exec httpd -f -p 8080 -h /www"]
    readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
`)
	p := d.waitPod("seeder", 30*time.Second, func(p *v1.Pod) bool { return running(p) && p.Status.PodIP != "" && podReady(p) })
	resp, err := http.Get("http://" + net.JoinHostPort(p.Status.PodIP, "8080") + "/blob")
	if err != nil {
		t.Fatalf("download from the pod: %v", err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil || n != netUpload {
		t.Fatalf("downloaded %d of %d bytes: %v", n, netUpload, err)
	}
	row := waitForValue(t, 10*time.Second, "top pods to show the seeder's counters", func() []string {
		return topRow(t, d, "seeder")
	}, func(r []string) bool { return r[5] != "-" })
	t.Logf("top pods row: %v", row)
	if out := mebibytes(t, row[5]); out < netUpload>>20 || out > netUpload>>20+1 {
		t.Fatalf("NET-OUT %dMi, want %dMi (+1 for headers): %v", out, netUpload>>20, row)
	}
	if !strings.Contains(d.log.String(), `source=veth`) {
		t.Fatalf("the daemon did not say it counts the pod by its veth:\n%s", d.log)
	}
}
