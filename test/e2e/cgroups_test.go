package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
)

// cgroupFile finds a file of a pod's container cgroup on this host, in the
// v1 controller's hierarchy or in the unified one.
func cgroupFile(t *testing.T, controller, rel, v1File, v2File string) string {
	for _, p := range []string{
		filepath.Join("/sys/fs/cgroup", controller, rel, v1File),
		filepath.Join("/sys/fs/cgroup", rel, v2File),
	} {
		if data, err := os.ReadFile(p); err == nil {
			return strings.TrimSpace(string(data))
		}
	}
	t.Fatalf("no %s/%s for %s", v1File, v2File, rel)
	return ""
}

func TestContainersRunInTheirCgroupsWithLimits(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	root := d.cgroupRoot("limits")
	d.withConfig("cgroups: {root: " + root + "}\n")
	d.start()
	d.write("limited.yaml", `apiVersion: v1
kind: Pod
metadata: {name: limited}
spec:
  runtimeClassName: process
  terminationGracePeriodSeconds: 2
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "cat /proc/self/oom_score_adj; cat /proc/self/cgroup; exec sleep 1000"]
    resources:
      requests: {cpu: 500m, memory: 64Mi}
      limits: {cpu: 500m, memory: 64Mi}
`)
	p := d.waitPod("limited", 10*time.Second, running)
	if p.Status.QOSClass != v1.PodQOSGuaranteed {
		t.Fatalf("qos = %s", p.Status.QOSClass)
	}
	rel := filepath.Join(root, "pod"+string(p.UID), "app")
	var out string
	waitFor(t, "the container's log to show its cgroup", func() bool { out, _, _ = d.cli("logs", "limited"); return strings.Contains(out, rel) })
	// Lowering a score needs CAP_SYS_RESOURCE, which some sandboxes drop
	// even for root; then the container keeps the inherited score.
	want := "0\n"
	if hasCapSysResource() {
		want = "-997\n"
	}
	if !strings.HasPrefix(out, want) {
		t.Fatalf("a Guaranteed container's oom_score_adj must be %q here:\n%s", want, out)
	}
	if got := cgroupFile(t, "memory", rel, "memory.limit_in_bytes", "memory.max"); got != "67108864" {
		t.Fatalf("memory limit = %s", got)
	}
	if got := cgroupFile(t, "cpu", rel, "cpu.cfs_quota_us", "cpu.max"); !strings.HasPrefix(got, "50000") {
		t.Fatalf("cpu quota = %s", got)
	}
	d.remove("limited.yaml")
	d.waitGone("limited", 10*time.Second)
	for _, dir := range []string{filepath.Join("/sys/fs/cgroup/memory", filepath.Dir(rel)), filepath.Join("/sys/fs/cgroup", filepath.Dir(rel))} {
		if _, err := os.Stat(dir); err == nil {
			t.Fatalf("pod cgroup %s left behind", dir)
		}
	}
}

func TestOOMKilledReason(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.withConfig("cgroups: {root: " + d.cgroupRoot("oom") + "}\n")
	d.start()
	d.write("hog.yaml", `apiVersion: v1
kind: Pod
metadata: {name: hog}
spec:
  runtimeClassName: process
  restartPolicy: Never
  containers:
  - name: app
    image: host
    command: ["sh", "-c", "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo survived"]
    resources:
      limits: {memory: 32Mi}
`)
	p := d.waitPod("hog", 30*time.Second, func(p *v1.Pod) bool { return p.Status.Phase == v1.PodFailed })
	st := p.Status.ContainerStatuses[0].State.Terminated
	if st == nil || st.Reason != "OOMKilled" || st.ExitCode != 137 {
		t.Fatalf("terminated = %+v", st)
	}
	out, _, _ := d.cli("get", "pods")
	if !strings.Contains(out, "OOMKilled") {
		t.Fatalf("get pods:\n%s", out)
	}
}

func hasCapSysResource() bool {
	data, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && caps&(1<<24) != 0
		}
	}
	return false
}

// cgroupRoot is a cgroup root of this test run alone, removed afterwards
// (with its QoS tiers), so runs never see each other's cgroups. The
// removal stops the daemon first and kills whatever is still inside:
// a container's PID 1 ignores SIGTERM and outlives its shim.
func (d *daemon) cgroupRoot(name string) string {
	root := fmt.Sprintf("podvisor-e2e-%d-%s", os.Getpid(), name)
	d.t.Cleanup(func() {
		d.kill()
		if left := removeCgroupTree(root); len(left) > 0 {
			d.t.Errorf("cgroups left behind: %v", left)
		}
	})
	return root
}

// removeCgroupTree kills every process in the cgroup tree root in every
// hierarchy (runc makes a container's cgroup in each v1 one) and removes
// its directories, deepest first, retrying for up to 10 s while the
// killed processes exit. It returns the directories it could not remove.
func removeCgroupTree(root string) []string {
	dirs, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup/*", root))
	if exists(filepath.Join("/sys/fs/cgroup", root)) {
		dirs = append(dirs, filepath.Join("/sys/fs/cgroup", root))
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		for _, dir := range dirs {
			killCgroupTree(dir)
			if err := rmdirTree(dir); err != nil {
				left = append(left, err.Error())
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killCgroupTree SIGKILLs every process in dir and its child cgroups.
func killCgroupTree(dir string) {
	filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
		if err == nil && e.Name() == "cgroup.procs" {
			data, _ := os.ReadFile(path)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		return nil
	})
}

// rmdirTree removes a cgroup directory and its child cgroups, deepest
// first (cgroup directories go with rmdir once their children are gone).
func rmdirTree(dir string) error {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			rmdirTree(filepath.Join(dir, e.Name()))
		}
	}
	if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func TestTopPods(t *testing.T) {
	requireRoot(t)
	d := newDaemon(t)
	d.start()
	hog := filepath.Join(filepath.Dir(binary), "hog")
	d.write("burner.yaml", processPod("burner", "Always", 2, "while :; do :; done"))
	d.write("holder.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: holder}
spec:
  runtimeClassName: process
  containers:
  - {name: app, image: host, command: [%q, "-mb", "64", "-step", "16"]}
`, hog))
	d.waitPod("burner", 10*time.Second, running)
	d.waitPod("holder", 10*time.Second, running)
	// The holder allocates its 64 MiB in steps; the burner gets what the
	// scheduler gives it, which on a loaded machine is far from a core:
	// it must show clearly busier than the holder, not a fixed share.
	type usage struct {
		burnerCPU, holderCPU, holderMem int
		out                             string
	}
	waitForValue(t, 10*time.Second, "top pods to show the burner busy (>=50m, above the holder) and the holder's 64Mi", func() usage {
		out, errOut, code := d.cli("top", "pods")
		if code != 0 {
			t.Fatalf("top pods: %s", errOut)
		}
		rows := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n")[1:] {
			if f := strings.Fields(line); len(f) >= 3 {
				rows[f[0]] = f
			}
		}
		var u usage
		u.out = "\n" + out
		if r := rows["burner"]; r != nil {
			u.burnerCPU, _ = strconv.Atoi(strings.TrimSuffix(r[1], "m"))
		}
		if r := rows["holder"]; r != nil {
			u.holderCPU, _ = strconv.Atoi(strings.TrimSuffix(r[1], "m"))
			u.holderMem, _ = strconv.Atoi(strings.TrimSuffix(r[2], "Mi"))
		}
		return u
	}, func(u usage) bool { return u.burnerCPU >= 50 && u.burnerCPU > u.holderCPU && u.holderMem >= 60 })
	out, _, _ := d.cli("top", "pods", "--containers")
	if !strings.Contains(out, "POD") || !strings.Contains(out, "burner") {
		t.Fatalf("top pods --containers:\n%s", out)
	}
}
