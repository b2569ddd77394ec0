package devmetrics

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"strconv"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/test/prereq"
)

// TestMain doubles as the workload of TestResourceMetricsOfARealCgroup:
// placed in its cgroup, it allocates and touches 8 MiB and spins a
// little, so its memory and CPU are charged there.
func TestMain(m *testing.M) {
	if os.Getenv("PODVISOR_TEST_WORKLOAD") == "1" {
		bufio.NewReader(os.Stdin).ReadString('\n')
		buf := make([]byte, 8<<20)
		for i := range buf {
			buf[i] = byte(i)
		}
		for end := time.Now().Add(20 * time.Millisecond); time.Now().Before(end); {
		}
		os.Stdout.WriteString("ready\n")
		time.Sleep(100 * time.Second)
		_ = buf[len(buf)-1]
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// The resource metrics of a pod and container in real cgroups (v1 or v2,
// whichever the host has) are above zero, read as the scrape reads them.
func TestResourceMetricsOfARealCgroup(t *testing.T) {
	prereq.Root(t, "cgroups")
	drv, err := cgroups.Detect("/sys/fs/cgroup")
	if err != nil {
		prereq.Missing(t, "a cgroup hierarchy: %v", err)
	}
	podCg := fmt.Sprintf("podvisor-devmetrics-test-%d", os.Getpid())
	ctrCg := path.Join(podCg, "app")
	t.Cleanup(func() { drv.Kill(podCg); drv.Remove(podCg) })
	if err := drv.Ensure(ctrCg, resources.Limits{}); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PODVISOR_TEST_WORKLOAD=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	pl := drv.Placement(ctrCg)
	if drv.Version() == 2 {
		dir, err := os.Open(pl.Dir)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	for _, procs := range pl.Procs {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatalf("placing into %s: %v", procs, err)
		}
	}
	stdin.Write([]byte("go\n"))
	ready := make([]byte, 6)
	if _, err := stdout.Read(ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("the workload did not allocate: %q %v", ready, err)
	}

	r := NewRecorder(time.Now())
	p := pod("web", v1.PodRunning, 0, true)
	r.Observe([]*v1.Pod{p}, []PodTarget{{UID: p.UID, Namespace: "default", Name: "web", Cgroup: podCg,
		Containers: []ContainerTarget{{Name: "app", Cgroup: ctrCg, StartedAt: time.Now()}}}}, drv, time.Now())
	c := NewCollector(r, Options{Node: ProcNode{MemoryCgroup: cgroups.V1MemoryMount(), FsPath: t.TempDir()}})
	fams := parse(t, write(t, c.Resource))
	for _, s := range []struct {
		name   string
		labels []string
	}{
		{"container_cpu_usage_seconds_total", []string{"container", "app", "pod", "web"}},
		{"container_memory_working_set_bytes", []string{"container", "app", "pod", "web"}},
		{"pod_cpu_usage_seconds_total", []string{"pod", "web"}},
		{"pod_memory_working_set_bytes", []string{"pod", "web"}},
		{"node_cpu_usage_seconds_total", nil},
		{"node_memory_working_set_bytes", nil},
	} {
		v, ok := sample(fams, s.name, s.labels...)
		t.Logf("%s%v = %v", s.name, s.labels, v)
		if !ok || v <= 0 {
			t.Errorf("%s%v = %v (found %v), want > 0", s.name, s.labels, v, ok)
		}
	}
	if v, _ := sample(fams, "container_memory_working_set_bytes", "container", "app"); v < 4<<20 {
		t.Errorf("the container's working set %v is below the 8 MiB it touched, halved", v)
	}
	if s := c.Summary(); s.PodsCPUSeconds <= 0 || s.PodsMemoryWorkingSet < 4<<20 || s.NodeMemoryAvailable == 0 {
		t.Errorf("summary %+v", s)
	}
}
