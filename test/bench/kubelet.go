package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
)

var kubeletBin = flag.String("kubelet", "", "kubelet binary: also run the containerd pods under it, standalone with static pods, "+
	"on its own containerd with the CRI plugin, as a same-run peer (test/bench/kubelet-build.sh builds one)")

var kubeletLog = flag.String("kubelet-log", "", "with -kubelet: keep a copy of the kubelet's log (-v=2) in this file")

const (
	pauseImage       = "podvisor.bench/pause:1"
	kubeletNode      = "podvisor-bench"
	devicePluginRoot = "/var/lib/kubelet"
)

// kubeletPeer runs the containerd bench's restart pods, and podCount idle
// pods, under the upstream kubelet on a private containerd with CRI, the
// same runc and image, and prints the same latencies beside podvisor's.
// The kubelet's generic PLEG relists every second (evented PLEG needs
// containerd 1.7), so its exit → running includes detection; the time
// from its PLEG ContainerDied event (its log at -v=2) to running is
// printed apart.
func kubeletPeer(kubelet, dir, archive, marks string, n, podCount int, pvRestart []time.Duration, pvPSS float64) error {
	kdir := filepath.Join(dir, "kubelet")
	manifests := filepath.Join(kdir, "manifests")
	for _, d := range []string{manifests, filepath.Join(kdir, "logs")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	pause := filepath.Join(kdir, "pause.tar")
	if err := ociimage.WriteFile(pause, ociimage.Image{Name: pauseImage, Entrypoint: []string{"sleep", "2147483647"}}); err != nil {
		return err
	}
	// Its own cgroup root, so that kubepods and every pod cgroup go with it
	// (removed last: after containerd and its containers).
	cgRoot := fmt.Sprintf("podvisor-bench-kubelet-%d", os.Getpid())
	if err := makeCgroupRoot(cgRoot); err != nil {
		return err
	}
	defer removeCgroupTree(cgRoot)
	ctrd, err := ctrdtest.LaunchCRI(func(cdir string) string {
		return fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  # Without CAP_SYS_RESOURCE (containers, some CI) the sandbox's -998
  # cannot be set; clamp to containerd's own, as podvisor's does not ask.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, pauseImage, filepath.Join(cdir, "runc"), filepath.Join(cdir, "cni"), filepath.Join(cdir, "cni"))
	})
	if err != nil {
		return err
	}
	defer ctrd.Close()
	for _, img := range []string{pause, archive} {
		if out, err := exec.Command("ctr", "--address", ctrd.Address, "-n", "k8s.io", "images", "import", img).CombinedOutput(); err != nil {
			return fmt.Errorf("ctr import %s: %v\n%s", img, err, out)
		}
	}

	config := filepath.Join(kdir, "config.yaml")
	os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: %s
podLogsDir: %s
cgroupDriver: cgroupfs
cgroupRoot: /%s
failSwapOn: false
failCgroupV1: false
containerRuntimeEndpoint: unix://%s
enableServer: false
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
healthzPort: 0
readOnlyPort: 0
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
`, manifests, filepath.Join(kdir, "logs"), cgRoot, ctrd.Address)), 0o644)
	logPath := filepath.Join(kdir, "kubelet.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	if *kubeletLog != "" {
		defer func() {
			if data, err := os.ReadFile(logPath); err == nil {
				os.WriteFile(*kubeletLog, data, 0o644)
			}
			os.WriteFile(*kubeletLog+".containerd", []byte(ctrd.Log()), 0o644)
		}()
	}
	cmd := exec.Command(kubelet, "--config", config, "--root-dir", filepath.Join(kdir, "root"),
		"--cert-dir", filepath.Join(kdir, "pki"), "--volume-plugin-dir", filepath.Join(kdir, "volume-plugins"),
		"--hostname-override", kubeletNode, "-v=2")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	defer removeLogLinks(logDirExisted())
	// The device plugin directory is fixed, not under --root-dir.
	defer removeIfNew(devicePluginRoot)()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer stopKubelet(cmd, manifests, ctrd.Address)
	fail := func(err error) error {
		data, _ := os.ReadFile(logPath)
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		return fmt.Errorf("kubelet peer: %w\n%s", err, data)
	}
	write := func(name, content string) {
		tmp := filepath.Join(kdir, name+".yaml")
		os.WriteFile(tmp, []byte(content), 0o644)
		os.Rename(tmp, filepath.Join(manifests, name+".yaml"))
	}
	mark := (&bench{marks: marks}).mark

	// A first pod, unmeasured: the kubelet's start (node status, cgroups)
	// must be behind the rounds.
	write("kwarm", containerdPod("kwarm", marks, "Always", startScript("kwarm"), false))
	if _, err := markWithin(mark, "kwarm", 120*time.Second); err != nil {
		return fail(err)
	}
	os.Remove(filepath.Join(manifests, "kwarm.yaml"))

	var restart, noticed, detect, decided []time.Duration
	var late int
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("krestart-%d", i)
		write(name, containerdPod(name, marks, "Always", restartScript(name), false))
		exited, err := markWithin(mark, name+".exit", 60*time.Second)
		if err != nil {
			return fail(err)
		}
		ran, err := mark(name + ".start")
		if err != nil {
			return fail(err)
		}
		os.Remove(filepath.Join(manifests, name+".yaml"))
		restart = append(restart, ran.Sub(exited))
		created, err := createRequested(ctrd.Log(), name+"-"+kubeletNode)
		if err != nil {
			return fail(err)
		}
		decided = append(decided, ran.Sub(created))
		// The pod worker may restart the container from the pod status it
		// reads before the PLEG's relist reports the death; such an event
		// comes after the restart began and is not counted.
		if seen, err := plegDied(logPath, "default/"+name+"-"+kubeletNode); err != nil {
			fmt.Printf("  %s: %v\n", name, err)
		} else if seen.After(created) {
			late++
		} else {
			noticed = append(noticed, ran.Sub(seen))
			detect = append(detect, seen.Sub(exited))
		}
	}
	v, _ := exec.Command(kubelet, "--version").Output()
	fmt.Printf("\npeer: %s, standalone (static pods), generic PLEG, %s (private instance, CRI), OCI runtime %s, %s, the same pods and image\n",
		strings.TrimSpace(string(v)), containerdVersion(), ociRuntimeVersion("runc"), seccompNote("Unconfined"))
	fmt.Printf("%-44s %8s %8s %8s\n", "latency (n="+fmt.Sprint(n)+")", "p50", "p90", "max")
	printDist("process exit -> restarted workload running", restart)
	if len(noticed) > 0 {
		printDist(fmt.Sprintf("  exit -> PLEG ContainerDied (relist, n=%d)", len(detect)), detect)
		printDist(fmt.Sprintf("  PLEG ContainerDied -> running (n=%d)", len(noticed)), noticed)
	}
	if late > 0 {
		fmt.Printf("  (%d restarts began before their PLEG ContainerDied event, not in the two rows above)\n", late)
	}
	printDist("  CRI CreateContainer received -> running", decided)
	fmt.Printf("  ratio kubelet/podvisor at p50: exit -> running %.2fx\n", float64(pct(restart, 50))/float64(pct(pvRestart, 50)))
	if podCount == 0 {
		return nil
	}

	for i := 0; i < podCount; i++ {
		name := fmt.Sprintf("kidle-%d", i)
		write(name, containerdPod(name, marks, "Always", startScript(name), false))
	}
	for i := 0; i < podCount; i++ {
		if _, err := markWithin(mark, fmt.Sprintf("kidle-%d", i), 60*time.Second); err != nil {
			return fail(err)
		}
	}
	time.Sleep(5 * time.Second)
	shims := pidsWith("containerd-shim-runc-v2", ctrd.Address)
	fmt.Println()
	total := printPSS(fmt.Sprintf("kubelet, %d containerd pods (smaps_rollup)", podCount),
		groupOf("kubelet", []int{cmd.Process.Pid}),
		groupOf("containerd (CRI)", pidsWith("containerd\x00--config\x00"+ctrd.Dir)),
		groupOf("containerd-shim-runc-v2", shims))
	pauses := pidsWith("sleep\x002147483647\x00")
	fmt.Printf("  shims: %d for %d pods; not counted: the pods' sandbox (pause) processes, here busybox sleep: %d, %.2f MiB PSS\n",
		len(shims), podCount, len(pauses), sumPSS(pauses))
	fmt.Printf("  ratio podvisor/kubelet total PSS, same run: %.2fx\n", pvPSS/total)
	return nil
}

// markWithin waits longer than mark does, for the kubelet's slower first
// steps (its start, a pod's first sandbox).
func markWithin(mark func(string) (time.Time, error), name string, limit time.Duration) (time.Time, error) {
	var err error
	for deadline := time.Now().Add(limit); time.Now().Before(deadline); {
		var at time.Time
		if at, err = mark(name); err == nil {
			return at, nil
		}
	}
	return time.Time{}, err
}

// plegDied finds when the kubelet's sync loop got the PLEG ContainerDied
// event of pod (namespace/name) in its log, waiting up to 5 s for it.
func plegDied(logPath, pod string) (time.Time, error) {
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		f, err := os.Open(logPath)
		if err != nil {
			return time.Time{}, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if bytes.Contains(line, []byte(`"SyncLoop (PLEG): event for pod"`)) &&
				bytes.Contains(line, []byte(`pod="`+pod+`"`)) && bytes.Contains(line, []byte(`"Type":"ContainerDied"`)) {
				f.Close()
				return klogTime(string(line))
			}
		}
		f.Close()
	}
	return time.Time{}, fmt.Errorf("no PLEG ContainerDied event for %s in the kubelet's log", pod)
}

// createRequested finds when containerd's CRI plugin received the
// kubelet's CreateContainer of the pod's first restart (attempt 1), from
// containerd's log.
func createRequested(ctrdLog, pod string) (time.Time, error) {
	sandbox := ""
	for _, line := range strings.Split(ctrdLog, "\n") {
		if sandbox == "" {
			if strings.Contains(line, "RunPodSandbox for &PodSandboxMetadata{Name:"+pod+",") {
				if _, after, ok := strings.Cut(line, `returns sandbox id \"`); ok {
					sandbox, _, _ = strings.Cut(after, `\"`)
				}
			}
			continue
		}
		if strings.Contains(line, `CreateContainer within sandbox \"`+sandbox+`\" for container &ContainerMetadata{Name:main,Attempt:1,}`) {
			_, after, _ := strings.Cut(line, `time="`)
			stamp, _, _ := strings.Cut(after, `"`)
			return time.Parse(time.RFC3339Nano, stamp)
		}
	}
	return time.Time{}, fmt.Errorf("no CRI CreateContainer of %s's attempt 1 in containerd's log", pod)
}

// klogTime parses a klog header, "I1127 13:50:01.123456 ...", in local
// time (klog's), this year.
func klogTime(line string) (time.Time, error) {
	if len(line) < 22 {
		return time.Time{}, fmt.Errorf("short klog line %q", line)
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}, err
	}
	return t.AddDate(time.Now().Year(), 0, 0), nil
}

func sumPSS(pids []int) float64 {
	var total float64
	for _, p := range pids {
		total += pssOf(p).pss
	}
	return total
}

// makeCgroupRoot creates root in every cgroup v1 hierarchy, its cpuset
// filled from the top's (a new cpuset has none).
func makeCgroupRoot(root string) error {
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if _, err := os.Stat(filepath.Join(h, "cgroup.procs")); err != nil {
			continue
		}
		d := filepath.Join(h, root)
		if err := os.Mkdir(d, 0o755); err != nil && !os.IsExist(err) {
			return err
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				os.WriteFile(filepath.Join(d, f), v, 0o644)
			}
		}
	}
	return nil
}

// stopKubelet removes the pods' manifests, waits (up to 30 s) for the
// kubelet to stop their containers, then stops it; the private
// containerd's Close kills whatever is left.
func stopKubelet(cmd *exec.Cmd, manifests, address string) {
	entries, _ := os.ReadDir(manifests)
	for _, e := range entries {
		os.Remove(filepath.Join(manifests, e.Name()))
	}
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		out, err := exec.Command("ctr", "--address", address, "-n", "k8s.io", "tasks", "ls", "-q").Output()
		if err != nil || len(bytes.TrimSpace(out)) == 0 {
			break
		}
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		cmd.Process.Kill()
		<-done
	}
}

// removeLogLinks removes the links the kubelet made in
// /var/log/containers for this node's pods.
func removeLogLinks(dirExisted bool) {
	links, _ := filepath.Glob("/var/log/containers/*" + kubeletNode + "*")
	for _, l := range links {
		os.Remove(l)
	}
	if !dirExisted {
		os.Remove("/var/log/containers") // the kubelet made it; only if empty
	}
}

func logDirExisted() bool {
	_, err := os.Stat("/var/log/containers")
	return err == nil
}

// removeIfNew returns a func that removes dir and what is in it, when dir
// did not exist at the call.
func removeIfNew(dir string) func() {
	if _, err := os.Stat(dir); err == nil {
		return func() {}
	}
	return func() { os.RemoveAll(dir) }
}
