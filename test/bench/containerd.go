package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/podvisor/podvisor/test/cgrouptree"
	"github.com/podvisor/podvisor/test/ctrdtest"
	"github.com/podvisor/podvisor/test/ociimage"
)

const benchImage = "podvisor.bench/busybox:1"

// kubeletPSS is the kubelet's total with 20 containerd pods (agent,
// containerd, shims), measured beside podvisor in issue 14; the goal is
// at most half of it.
const kubeletPSS = 219.7

var ctrdShimGroup = flag.String("containerd-shim-group", "device", "containerd.shimGroup of the containerd pods: device or pod")

var ctrdSeccomp = flag.String("containerd-seccomp", "", "seccompProfile type of the containerd pods, for every side: RuntimeDefault or Unconfined "+
	"(default: none, so each side's own default: podvisor's RuntimeDefault, the kubelet's Unconfined)")

// containerdPod is a one-container pod of the bench image with the marks
// directory mounted at /marks, on the host's network unless ownNetwork,
// with the -containerd-seccomp profile if one is set.
func containerdPod(name, marks, restartPolicy, script string, ownNetwork bool) string {
	security := ""
	if *ctrdSeccomp != "" {
		security = fmt.Sprintf("  securityContext: {seccompProfile: {type: %s}}\n", *ctrdSeccomp)
	}
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  hostNetwork: %t
  restartPolicy: %s
  terminationGracePeriodSeconds: 2
%s  volumes: [{name: marks, hostPath: {path: %s, type: Directory}}]
  containers:
  - name: main
    image: %s
    imagePullPolicy: Never
    command: ["sh", "-c", %q]
    volumeMounts: [{name: marks, mountPath: /marks}]
`, name, !ownNetwork, restartPolicy, security, marks, benchImage, script)
}

// seccompNote says which seccomp profile a side's containers ran under.
func seccompNote(sideDefault string) string {
	if *ctrdSeccomp != "" {
		return "seccomp " + *ctrdSeccomp + " (the pods')"
	}
	return "seccomp " + sideDefault + " (its default)"
}

func startScript(name string) string { return "stamp /marks/" + name + "; exec sleep 100000" }

func restartScript(name string) string {
	m := "/marks/" + name
	return fmt.Sprintf("if [ -e %[1]s.exit ]; then stamp %[1]s.start; exec sleep 100000; fi; stamp %[1]s.exit; exit 1", m)
}

// containerdBench measures containerd pods on a private containerd, and
// the same pods under "podman kube play" as the peer, in the same run.
func containerdBench(bin string, n, podCount int) error {
	var missing []string
	for _, b := range []string{"containerd", "runc"} {
		if _, err := exec.LookPath(b); err != nil {
			missing = append(missing, b)
		}
	}
	if os.Geteuid() != 0 || len(missing) > 0 {
		fmt.Printf("\ncontainerd pods: skipped (needs root, containerd and runc; missing %v)\n", missing)
		return nil
	}
	ctrd, err := ctrdtest.Launch()
	if err != nil {
		return err
	}
	defer ctrd.Close()
	dir, err := os.MkdirTemp("", "podvisor-bench-ctrd")
	if err != nil {
		return err
	}
	defer func() {
		exec.Command("sh", "-c", "grep "+dir+" /proc/mounts | cut -d' ' -f2 | sort -r | xargs -r umount -l").Run()
		os.RemoveAll(dir)
	}()
	stamp := filepath.Join(dir, "stamp")
	build := exec.Command("go", "build", "-o", stamp, "github.com/podvisor/podvisor/test/stamp")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building stamp: %v\n%s", err, out)
	}
	archive := filepath.Join(dir, "image.tar")
	if err := ociimage.WriteFile(archive, ociimage.Image{Name: benchImage, Files: map[string]string{"stamp": stamp}}); err != nil {
		return err
	}
	config := filepath.Join(dir, "config.yaml")
	cgRoot := fmt.Sprintf("podvisor-bench-%d", os.Getpid())
	defer removeCgroupTree(cgRoot)
	os.WriteFile(config, []byte(fmt.Sprintf("cgroups: {root: %s}\ncontainerd: {address: %s, runcRoot: %s, sandboxDir: %s, shimGroup: %s}\n",
		cgRoot, ctrd.Address, ctrd.RuncRoot(), filepath.Join(dir, "sandbox"), *ctrdShimGroup)), 0o644)
	b, err := startDaemon(bin, dir, "--config", config)
	if err != nil {
		return err
	}
	defer b.stop()
	if _, err := b.client.ImportImage(context.Background(), archive); err != nil {
		return fmt.Errorf("importing the bench image: %w", err)
	}
	time.Sleep(time.Second)
	plugin := pidOf("podvisor-containerd", "serve", ctrd.Address)
	idle, pluginIdle := rss(b.cmd.Process.Pid), rss(plugin)

	// start times manifest write → workload running.
	start := func(ownNetwork bool) func(string) (time.Time, time.Time, error) {
		return func(name string) (time.Time, time.Time, error) {
			at := b.write(name, containerdPod(name, b.marks, "Always", startScript(name), ownNetwork))
			ran, err := b.mark(name)
			os.Remove(filepath.Join(b.manifests, name+".yaml"))
			return at, ran, err
		}
	}
	toRun, err := b.timed(n, "cstart", start(false))
	if err != nil {
		return fmt.Errorf("%w\n%s", err, b.log.String())
	}
	toRunCNI, err := b.timed(n, "cnet", start(true))
	if err != nil {
		return fmt.Errorf("%w\n%s", err, b.log.String())
	}
	var firsts []string // the first instance of each round's pod
	restart, exits, err := b.timedAt(n, "crestart", func(name string) (time.Time, time.Time, error) {
		b.write(name, containerdPod(name, b.marks, "Always", restartScript(name), false))
		exited, err := b.mark(name + ".exit")
		if err != nil {
			return exited, exited, err
		}
		ran, err := b.mark(name + ".start")
		first := ""
		if p, perr := b.client.Pod(context.Background(), "default", name); perr == nil {
			first = string(p.UID) + "_main_1"
		}
		firsts = append(firsts, first)
		os.Remove(filepath.Join(b.manifests, name+".yaml"))
		return exited, ran, err
	})
	if err != nil {
		return fmt.Errorf("%w\n%s", err, b.log.String())
	}
	detect, noticedToRun := splitAtNotice(b.log.String(), firsts, exits, restart)
	if podCount == 0 { // -containerd-only -containerd-pods 0: latencies alone
		fmt.Printf("\ncontainerd pods — %s, OCI runtime %s, %s\n", containerdVersion(), ociRuntimeVersion("runc"), seccompNote("RuntimeDefault"))
		fmt.Printf("%-44s %8s %8s %8s\n", "latency (n="+fmt.Sprint(n)+")", "p50", "p90", "max")
		printDist("manifest write -> workload running", toRun)
		printDist("process exit -> restarted workload running", restart)
		printNoticed(detect, noticedToRun)
		if *kubeletBin != "" {
			return kubeletPeer(*kubeletBin, dir, archive, b.marks, n, 0, restart, 0)
		}
		return nil
	}

	for i := 0; i < podCount; i++ {
		name := fmt.Sprintf("cidle-%d", i)
		b.write(name, containerdPod(name, b.marks, "Always", startScript(name), false))
	}
	for i := 0; i < podCount; i++ {
		if _, err := b.mark(fmt.Sprintf("cidle-%d", i)); err != nil {
			return fmt.Errorf("%w\n%s", err, b.log.String())
		}
	}
	time.Sleep(2 * time.Second)
	full, pluginFull := rss(b.cmd.Process.Pid), rss(plugin)
	ctrdMem := []group{
		groupOf("daemon (podvisor run)", []int{b.cmd.Process.Pid}),
		groupOf("plugin (podvisor-containerd)", pidsWith("podvisor-containerd", "serve", ctrd.Address)),
		groupOf("containerd", pidsWith("containerd\x00--config\x00"+ctrd.Dir)),
		groupOf("containerd-shim-runc-v2", pidsWith("containerd-shim-runc-v2", ctrd.Address)),
		groupOf("log drivers (podvisor-shim log-path)", pidsWith("podvisor-shim", "log-path", dir)),
	}
	shims := sumRSS("containerd-shim-runc-v2", ctrd.Address)
	loggers := sumRSS("podvisor-shim", "log-path")

	fmt.Printf("\ncontainerd pods — %s (private instance), OCI runtime %s, %s, local side-loaded image, one container per pod, hostNetwork\n",
		containerdVersion(), ociRuntimeVersion("runc"), seccompNote("RuntimeDefault"))
	fmt.Printf("%-44s %8s %8s %8s\n", "latency (n="+fmt.Sprint(n)+")", "p50", "p90", "max")
	printDist("manifest write -> workload running", toRun)
	printDist("  the same with its own network (CNI)", toRunCNI)
	printDist("process exit -> restarted workload running", restart)
	printNoticed(detect, noticedToRun)
	fmt.Printf("daemon RSS, 0 / %d containerd pods       %6.2f / %6.2f MiB\n", podCount, idle.total, full.total)
	fmt.Printf("plugin RSS, 0 / %d containerd pods       %6.2f / %6.2f MiB  (podvisor-containerd)\n", podCount, pluginIdle.total, pluginFull.total)
	fmt.Printf("containerd shims (shimGroup %s): %d for %d pods, %.2f MiB RSS each (anon %.2f); log drivers: %d\n", *ctrdShimGroup,
		shims.count, podCount, shims.total/float64(max(shims.count, 1)), shims.anon/float64(max(shims.count, 1)), loggers.count)

	fmt.Println()
	total := printPSS(fmt.Sprintf("containerd pods: %d, memory (smaps_rollup)", podCount), ctrdMem...)
	if podCount == 20 {
		fmt.Printf("  against the kubelet's %.1f MiB with 20 pods (issue 14, another run): %.2fx, goal <= 0.5x\n", kubeletPSS, total/kubeletPSS)
	}
	if ws, err := reclaimCold(plugin, 10*time.Second); err != nil {
		fmt.Printf("  plugin working set: not measured: %v\n", err)
	} else {
		fmt.Printf("  plugin PSS 10 s after its cold pages were paged out: %.2f MiB (anon %.2f)\n", ws.pss, ws.anon)
	}

	for i := 0; i < podCount; i++ {
		os.Remove(filepath.Join(b.manifests, fmt.Sprintf("cidle-%d.yaml", i)))
	}
	if *kubeletBin != "" {
		// The peer's containerd and shims share their text with these: stop
		// them first, or each side's PSS would hold half of it.
		b.stop()
		ctrd.Close()
		if err := kubeletPeer(*kubeletBin, dir, archive, b.marks, n, podCount, restart, total); err != nil {
			return err
		}
	}
	return podmanPeer(dir, archive, b, n, podCount, toRun, restart, total)
}

// timed runs n rounds; each returns when its clock started and when the
// workload said it ran.
func (b *bench) timed(n int, prefix string, round func(name string) (from, to time.Time, err error)) ([]time.Duration, error) {
	lat, _, err := b.timedAt(n, prefix, round)
	return lat, err
}

// timedAt is timed that also returns when each round's clock started.
func (b *bench) timedAt(n int, prefix string, round func(name string) (from, to time.Time, err error)) ([]time.Duration, []time.Time, error) {
	var lat []time.Duration
	var froms []time.Time
	for i := 0; i < n; i++ {
		from, to, err := round(fmt.Sprintf("%s-%d", prefix, i))
		if err != nil {
			return nil, nil, err
		}
		lat = append(lat, to.Sub(from))
		froms = append(froms, from)
	}
	return lat, froms, nil
}

// podmanPeer runs the same pods with "podman kube play" (Debian's podman)
// and prints the same latencies and the ratios.
func podmanPeer(dir, archive string, b *bench, n, podCount int, toRun, restart []time.Duration, podvisorPSS float64) error {
	if _, err := exec.LookPath("podman"); err != nil {
		fmt.Println("peer podman kube play: skipped (podman not installed)")
		return nil
	}
	// This sandbox forbids raising rlimits; podman's defaults raise them.
	// runc, as podvisor's containerd uses: podman takes crun when it is
	// installed, which differs in cost (and fails on hybrid cgroups).
	conf := filepath.Join(dir, "containers.conf")
	os.WriteFile(conf, []byte("[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=4096:4096\"]\n[engine]\nruntime = \"runc\"\n"), 0o644)
	podman := func(args ...string) ([]byte, error) {
		cmd := exec.Command("podman", args...)
		cmd.Env = append(os.Environ(), "CONTAINERS_CONF="+conf)
		return cmd.CombinedOutput()
	}
	if out, err := podman("load", "-i", archive); err != nil {
		return fmt.Errorf("podman load: %v\n%s", err, out)
	}
	defer podman("rmi", "-f", benchImage)
	play := func(name, script string) (string, error) {
		file := filepath.Join(dir, name+".yaml")
		os.WriteFile(file, []byte(containerdPod(name, b.marks, "Always", script, false)), 0o644)
		if out, err := podman("kube", "play", file); err != nil {
			return file, fmt.Errorf("podman kube play: %v\n%s", err, out)
		}
		return file, nil
	}
	pmRun, err := b.timed(n, "pmstart", func(name string) (time.Time, time.Time, error) {
		at := time.Now()
		file, err := play(name, startScript(name))
		if err != nil {
			return at, at, err
		}
		ran, err := b.mark(name)
		podman("kube", "down", file)
		return at, ran, err
	})
	if err != nil {
		return err
	}
	pmRestart, err := b.timed(n, "pmrestart", func(name string) (time.Time, time.Time, error) {
		file, err := play(name, restartScript(name))
		if err != nil {
			return time.Time{}, time.Time{}, err
		}
		defer podman("kube", "down", file)
		exited, err := b.mark(name + ".exit")
		if err != nil {
			return exited, exited, err
		}
		ran, err := b.mark(name + ".start")
		return exited, ran, err
	})
	if err != nil {
		return err
	}
	// Per-pod memory: conmon supervises each container (and the pod's
	// infra container).
	var files []string
	for i := 0; i < podCount; i++ {
		name := fmt.Sprintf("pmidle-%d", i)
		file, err := play(name, startScript(name))
		files = append(files, file)
		if err != nil {
			return err
		}
		if _, err := b.mark(name); err != nil {
			return err
		}
	}
	time.Sleep(2 * time.Second)
	conmon := sumRSS("conmon", "--api-version")
	// podman has no daemon: per pod, conmon for the container and for the
	// infra container, and the infra container's catatonit.
	conmons := pidsWith("conmon", "--api-version")
	podmanMem := []group{groupOf("conmon", conmons), groupOf("infra (catatonit)", childrenOf(conmons, "catatonit"))}
	for _, f := range files {
		podman("kube", "down", f)
	}
	v, _ := podman("--version")
	oci, _ := podman("info", "--format", "{{.Host.OCIRuntime.Name}}")
	fmt.Printf("\npeer: %s, OCI runtime %s, kube play, the same pods (hostNetwork) and image\n", strings.TrimSpace(string(v)),
		ociRuntimeVersion(strings.TrimSpace(string(oci))))
	printDist("kube play -> workload running", pmRun)
	printDist("process exit -> restarted (restartPolicy Always)", pmRestart)
	fmt.Printf("  ratio podman/podvisor at p50: start %.1fx, restart %.1fx\n",
		float64(pct(pmRun, 50))/float64(pct(toRun, 50)), float64(pct(pmRestart, 50))/float64(pct(restart, 50)))
	fmt.Printf("per pod: conmon %.2f MiB RSS (anon %.2f) x %.1f per pod (container and infra), n=%d\n",
		conmon.total/float64(max(conmon.count, 1)), conmon.anon/float64(max(conmon.count, 1)),
		float64(conmon.count)/float64(podCount), conmon.count)
	fmt.Println()
	peer := printPSS(fmt.Sprintf("podman kube play, %d pods (smaps_rollup)", podCount), podmanMem...)
	fmt.Printf("  ratio podvisor/podman total PSS: %.2fx\n", podvisorPSS/peer)
	return nil
}

// ociRuntimeVersion is an OCI runtime's name and version ("runc 1.1.5").
func ociRuntimeVersion(name string) string {
	out, err := exec.Command(name, "--version").Output()
	if err != nil {
		return name
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(strings.Replace(first, " version", "", 1))
}

// pidOf finds a process whose command line holds every word.
func pidOf(words ...string) int {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if hasAll(data, words) {
			var pid int
			fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
			return pid
		}
	}
	return 0
}

// sumRSS adds up the RSS of the processes whose command line holds every
// word.
func sumRSS(words ...string) mem {
	var m mem
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !hasAll(data, words) {
			continue
		}
		var pid int
		fmt.Sscan(filepath.Base(filepath.Dir(p)), &pid)
		r := rss(pid)
		m.total += r.total
		m.anon += r.anon
		m.count++
	}
	return m
}

func hasAll(cmdline []byte, words []string) bool {
	for _, w := range words {
		if !bytes.Contains(cmdline, []byte(w)) {
			return false
		}
	}
	return true
}

func containerdVersion() string {
	out, err := exec.Command("containerd", "--version").Output()
	if err != nil {
		return "containerd"
	}
	f := strings.Fields(string(out))
	if len(f) >= 3 {
		return "containerd " + f[2]
	}
	return strings.TrimSpace(string(out))
}

// removeCgroupTree removes a cgroup root in every hierarchy, children
// first.
func removeCgroupTree(root string) { cgrouptree.RemoveEmpty(root) }
