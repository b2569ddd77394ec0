package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	supervisorapi "github.com/podvisor/podvisor/supervisor/api"
	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
)

// objectsRealBench enrols one real podvisor daemon (this tree) with a
// podhub, applies pods hub pods to it that mount the ConfigMaps, and
// times each change of the ConfigMap from podhub apply until every pod
// sees the new content through its own mount: the bench reads each
// container's file through /proc/PID/root, which is the container's view
// (its root and its mount namespace).
func objectsRealBench(bin string, pods, changes int) error {
	if os.Geteuid() != 0 {
		fmt.Println("\nConfigMap to a real device: skipped (needs root)")
		return nil
	}
	ph, tmp, podhub, done, err := fleetHub(bin, "podvisor-objbench-real")
	if err != nil {
		return err
	}
	defer done()
	dir := filepath.Join(tmp, "real")
	data := filepath.Join(dir, "data")
	cgroup := fmt.Sprintf("podvisor-objbench-%d", os.Getpid())
	defer removeCgroups(cgroup)
	const id = "objbench-real"
	bundle := filepath.Join(dir, "bundle")
	if out, err := exec.Command(podhub, "--data-dir", ph.data, "device", "add", id, "--out", bundle,
		"--install-dir", bundle, "--url", "mqtts://"+ph.addr).CombinedOutput(); err != nil {
		return fmt.Errorf("podhub device add %s: %v %s", id, err, out)
	}
	hubConf, err := os.ReadFile(filepath.Join(bundle, "podvisor.yaml"))
	if err != nil {
		return err
	}
	// The side-loaded bench image is one hub pods may use, and hub
	// process pods run here (as root: the bench's).
	conf := strings.Replace(string(hubConf), "hub:\n", "hub:\n  images: {shared: ["+benchImage+"]}\n  allowProcessPods: true\n  allowRootProcessPods: true\n", 1) +
		"cgroups: {root: " + cgroup + "}\n"
	image, runtimeClass, mountPath := benchImage, "", "/cfg"
	var archive string
	switch *objectsRuntime {
	case "containerd":
		for _, b := range []string{"containerd", "runc"} {
			if _, err := exec.LookPath(b); err != nil {
				fmt.Printf("\nConfigMap to a real device: skipped (containerd pods need %s)\n", b)
				return nil
			}
		}
		ctrd, err := ctrdtest.Launch()
		if err != nil {
			return err
		}
		defer ctrd.Close()
		defer ctrdtest.UnmountUnder(dir)
		archive = filepath.Join(dir, "image.tar")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		if err := ociimage.WriteFile(archive, ociimage.Image{Name: benchImage}); err != nil {
			return err
		}
		conf += fmt.Sprintf("containerd: {address: %s, runcRoot: %s, sandboxDir: %s, shimGroup: device}\n",
			ctrd.Address, ctrd.RuncRoot(), filepath.Join(dir, "sandbox"))
	case "process":
		image, runtimeClass, mountPath = "host", "process", filepath.Join(dir, "cfg")
		for _, p := range []string{mountPath, mountPath + "-fixed"} {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		}
	default:
		return fmt.Errorf("-objects-runtime %q: want containerd or process", *objectsRuntime)
	}
	config := filepath.Join(dir, "config.yaml")
	manifests := filepath.Join(dir, "manifests")
	if err := os.MkdirAll(manifests, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(config, []byte(conf), 0o644); err != nil {
		return err
	}
	b := &bench{dir: dir, socket: filepath.Join(dir, "podvisor.sock")}
	b.cmd = exec.Command(bin, "run", "--manifests", manifests, "--data-dir", data, "--socket", b.socket,
		"--config", config, "--stop-pods-on-exit")
	b.cmd.Stdout, b.cmd.Stderr = &b.log, &b.log
	if err := b.cmd.Start(); err != nil {
		return err
	}
	defer stopReal(b, data)
	b.client = supervisorapi.NewClient(b.socket)
	if err := b.waitUp(); err != nil {
		return err
	}
	if archive != "" {
		if _, err := b.client.ImportImage(context.Background(), archive); err != nil {
			return fmt.Errorf("importing the bench image: %w", err)
		}
	}
	if err := podhubApply(podhub, ph.data, tmp, "fixed.yaml", fixedYAML()); err != nil {
		return err
	}
	if err := podhubApply(podhub, ph.data, tmp, "cm.yaml", configMapYAML("v0")); err != nil {
		return err
	}
	tagBase := fmt.Sprintf("objbench-%d-", os.Getpid())
	var docs []string
	for i := range pods {
		docs = append(docs, objectsPodYAML(fmt.Sprintf("objbench-%02d", i), image, runtimeClass, mountPath, fmt.Sprintf("%s%02d", tagBase, i)))
	}
	start := time.Now()
	if err := podhubApply(podhub, ph.data, tmp, "pods.yaml", strings.Join(docs, "---\n"), "--device", id); err != nil {
		return err
	}
	// The pods' processes, found by their tag, each seeing version v0.
	var views map[string]string // tag → the version file in the container's view
	for deadline := time.Now().Add(5 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		views = podViews(tagBase, mountPath)
		seen := 0
		for _, v := range views {
			if readVersion(v) == "v0" {
				seen++
			}
		}
		if seen == pods {
			break
		}
		if time.Now().After(deadline) || failedStart(b.log.String()) {
			return fmt.Errorf("%d of %d pods running with the ConfigMap in their view after 5 min; the daemon's log ends:\n%s",
				seen, pods, lastLines(b.log.String(), 30))
		}
	}
	fmt.Printf("\nConfigMap to one real device: podvisor (this tree) enrolled with podhub, %d %s hub pods mounting it, %s\n",
		pods, *objectsRuntime, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("  load average before: %s\n", loadAverage())
	fmt.Printf("  pods applied -> all %d running with the ConfigMap mounted   %8.2f s\n", pods, time.Since(start).Seconds())

	w := &versionWait{}
	var alls, perPod, cli []time.Duration
	cpuHub, cpuDev := 0.0, 0.0
	for k := 1; k <= changes; k++ {
		version := fmt.Sprintf("v%d", k)
		w.reset(version, pods)
		h0, _ := cpuTicks(ph.pid())
		d0, _ := cpuTicks(b.cmd.Process.Pid)
		w.begin()
		t0 := time.Now()
		if err := podhubApply(podhub, ph.data, tmp, "cm.yaml", configMapYAML(version)); err != nil {
			return err
		}
		cli = append(cli, time.Since(t0))
		// Each pod's file read through its own view every 2 ms.
		stop := make(chan struct{})
		go func() {
			for {
				for tag, v := range views {
					w.saw(tag, readVersion(v))
				}
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Millisecond):
				}
			}
		}()
		got, err := w.wait(2*time.Minute, "change "+version+" in the pods' views")
		close(stop)
		if err != nil {
			return fmt.Errorf("%w; the daemon's log ends:\n%s", err, lastLines(b.log.String(), 30))
		}
		h1, _ := cpuTicks(ph.pid())
		d1, _ := cpuTicks(b.cmd.Process.Pid)
		cpuHub += float64(h1-h0) / clockTicks
		cpuDev += float64(d1-d0) / clockTicks
		alls = append(alls, got[len(got)-1])
		perPod = append(perPod, got...)
		time.Sleep(time.Second)
	}
	fmt.Printf("  podhub apply of a changed ConfigMap -> the new content in every pod's mount (n=%d changes)\n", changes)
	fmt.Printf("    the last pod of each change      %s\n", dist(alls))
	fmt.Printf("    every pod, every change          %s\n", dist(perPod))
	fmt.Printf("    of which podhub apply's own run  %s  (the CLI: start, read, send, the hub's answer)\n", dist(cli))
	fmt.Printf("  CPU per change: podhub %.2f s, the device's daemon %.2f s\n", cpuHub/float64(changes), cpuDev/float64(changes))
	fmt.Printf("  load average after: %s\n", loadAverage())
	return nil
}

// podViews finds the processes whose last argument starts with tagBase
// and returns, by tag, the ConfigMap's version file as each sees it.
func podViews(tagBase, mountPath string) map[string]string {
	out := map[string]string{}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		tag := args[len(args)-1]
		if len(args) < 3 || args[1] != "-c" || !strings.HasPrefix(tag, tagBase) {
			continue
		}
		out[tag] = filepath.Join(filepath.Dir(p), "root", mountPath, "version")
	}
	return out
}

// failedStart tells whether the daemon's log says a pod will not start:
// no use waiting for it. (A FailedMount passes: the pods may come before
// their objects.)
func failedStart(log string) bool {
	return strings.Contains(log, "hub pod refused") || strings.Contains(log, "reason=ErrImageNeverPull")
}

func readVersion(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(bytes.TrimSpace(b))
}

// stopReal stops the daemon (its pods with it) and kills what it may
// have left: processes naming its data directory.
func stopReal(b *bench, data string) {
	if b.cmd.Process != nil && b.cmd.ProcessState == nil {
		b.cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { b.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			b.cmd.Process.Kill()
			<-done
		}
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		c, err := os.ReadFile(p)
		if err == nil && strings.Contains(string(c), "podvisor-shim") && strings.Contains(string(c), data) {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
