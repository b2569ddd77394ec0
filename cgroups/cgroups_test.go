package cgroups

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/test/prereq"
)

// driver returns this host's driver, or skips (fails in CI) without root
// or a cgroup hierarchy.
func driver(t *testing.T) Driver {
	t.Helper()
	prereq.Root(t, "cgroups")
	d, err := Detect("/sys/fs/cgroup")
	if err != nil {
		prereq.Missing(t, "a cgroup hierarchy: %v", err)
	}
	return d
}

// readLimit reads a limit file of the driver's hierarchy.
func readLimit(t *testing.T, d Driver, path, controller, v1File, v2File string) string {
	t.Helper()
	var file string
	switch d := d.(type) {
	case *unified:
		file = filepath.Join(d.mount, clean(path), v2File)
	case *legacy:
		file = filepath.Join(d.mounts[controller], clean(path), v1File)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("reading %s: %v", file, err)
	}
	return strings.TrimSpace(string(data))
}

func TestLimitsLandInTheCgroupFiles(t *testing.T) {
	d := driver(t)
	root := fmt.Sprintf("podvisor-test-%d", os.Getpid())
	layout := Layout{Root: root}
	pod := layout.Pod(v1.PodQOSBurstable, "uid-1")
	ctr := layout.Container(pod, "uid-1", "app")
	t.Cleanup(func() { d.Remove(root) })
	for _, p := range layout.Tiers() {
		if err := d.Ensure(p, resources.Limits{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := d.Ensure(pod, resources.Limits{CPUShares: 512, PidsMax: 64}); err != nil {
		t.Fatal(err)
	}
	l := resources.Limits{CPUShares: 256, CPUQuota: 25000, MemoryMax: 64 << 20, MemoryLow: 32 << 20}
	if err := d.Ensure(ctr, l); err != nil {
		t.Fatal(err)
	}
	t.Logf("cgroup v%d", d.Version())
	checks := []struct{ controller, v1File, v2File, want string }{
		{"memory", "memory.limit_in_bytes", "memory.max", strconv.Itoa(64 << 20)},
		{"cpu", "cpu.cfs_quota_us", "cpu.max", map[int]string{1: "25000", 2: "25000 100000"}[d.Version()]},
		{"cpu", "cpu.shares", "cpu.weight", map[int]string{1: "256", 2: strconv.FormatUint(resources.CPUWeight(256), 10)}[d.Version()]},
	}
	for _, c := range checks {
		if got := readLimit(t, d, ctr, c.controller, c.v1File, c.v2File); got != c.want {
			t.Errorf("%s/%s = %q, want %q", c.v1File, c.v2File, got, c.want)
		}
	}
	if got := readLimit(t, d, pod, "pids", "pids.max", "pids.max"); got != "64" {
		t.Errorf("pod pids.max = %q", got)
	}
	if d.Version() == 2 {
		if got := readLimit(t, d, ctr, "memory", "", "memory.low"); got != strconv.Itoa(32<<20) {
			t.Errorf("memory.low = %q", got)
		}
	}
}

func TestPlaceStatAndKill(t *testing.T) {
	d := driver(t)
	path := fmt.Sprintf("podvisor-test-%d/place", os.Getpid())
	t.Cleanup(func() { d.Remove(filepath.Dir(path)) })
	if err := d.Ensure(path, resources.Limits{MemoryMax: 128 << 20}); err != nil {
		t.Fatal(err)
	}
	// On v2 the process starts inside the cgroup (clone3 CLONE_INTO_CGROUP);
	// on v1 it is moved in right after it starts.
	// Memory is charged where it is allocated, so the helper (this test
	// binary, see TestMain) allocates 8 MiB only once placed.
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "PODVISOR_TEST_ALLOCATE=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	p := d.Placement(path)
	if d.Version() == 2 {
		dir, err := os.Open(p.Dir)
		if err != nil {
			t.Fatal(err)
		}
		defer dir.Close()
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: int(dir.Fd())}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	for _, procs := range p.Procs {
		if err := os.WriteFile(procs, []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatalf("placing into %s: %v", procs, err)
		}
	}
	var procs []int
	before, _ := d.Stats(path)
	stdin.Write([]byte("go\n"))
	ready := make([]byte, 6)
	if _, err := stdout.Read(ready); err != nil || string(ready) != "ready\n" {
		t.Fatalf("workload did not allocate: %q %v", ready, err)
	}
	procs, _ = d.Procs(path)
	if len(procs) != 1 || procs[0] != cmd.Process.Pid {
		t.Fatalf("procs in the cgroup = %v, want [%d]", procs, cmd.Process.Pid)
	}
	st, err := d.Stats(path)
	if err != nil || st.Pids < 1 || st.MemoryWorkingSet < before.MemoryWorkingSet+4<<20 || st.CPUUsageNanos == 0 {
		t.Fatalf("stats = %+v (before the allocation %+v), %v", st, before, err)
	}
	if err := d.Kill(path); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if procs, _ = d.Procs(path); len(procs) == 0 {
			return
		}
	}
	t.Fatalf("processes left after Kill: %v", procs)
}

// TestMain doubles as the allocating helper of TestPlaceStatAndKill.
func TestMain(m *testing.M) {
	if os.Getenv("PODVISOR_TEST_ALLOCATE") == "1" {
		bufio.NewReader(os.Stdin).ReadString('\n')
		buf := make([]byte, 8<<20)
		for i := range buf {
			buf[i] = 1 // touch every page so it is resident
		}
		os.Stdout.WriteString("ready\n")
		time.Sleep(100 * time.Second)
		_ = buf[len(buf)-1]
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestLayouts(t *testing.T) {
	uid := types.UID("ab-cd")
	fs := Layout{Root: "podvisor"}
	sd := Layout{Root: "podvisor", Systemd: true}
	for _, c := range []struct{ got, want string }{
		{fs.Pod(v1.PodQOSGuaranteed, uid), "podvisor/podab-cd"},
		{fs.Pod(v1.PodQOSBurstable, uid), "podvisor/burstable/podab-cd"},
		{fs.Container(fs.Pod(v1.PodQOSBestEffort, uid), uid, "app"), "podvisor/besteffort/podab-cd/app"},
		{strings.Join(sd.Tiers(), " "), "podvisor.slice podvisor.slice/podvisor-burstable.slice podvisor.slice/podvisor-besteffort.slice"},
		{sd.Pod(v1.PodQOSGuaranteed, uid), "podvisor.slice/podvisor-podab_cd.slice"},
		{sd.Pod(v1.PodQOSBurstable, uid), "podvisor.slice/podvisor-burstable.slice/podvisor-burstable-podab_cd.slice"},
		{sd.Container(sd.Pod(v1.PodQOSBestEffort, uid), uid, "app"),
			"podvisor.slice/podvisor-besteffort.slice/podvisor-besteffort-podab_cd.slice/podvisor-ab_cd-app.scope"},
		{Layout{Root: "edge/pv", Systemd: true}.Pod(v1.PodQOSGuaranteed, uid), "edge.slice/edge-pv.slice/edge-pv-podab_cd.slice"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
	// runc's placement of a containerd container, named by its ID.
	fsCg, fsSpec := fs.Runc(fs.Pod(v1.PodQOSBurstable, uid), "ab-cd_app_1")
	sdCg, sdSpec := sd.Runc(sd.Pod(v1.PodQOSBurstable, uid), "ab-cd_app_1")
	for _, c := range []struct{ got, want string }{
		{fsCg, "podvisor/burstable/podab-cd/ab-cd_app_1"},
		{fsSpec, "/podvisor/burstable/podab-cd/ab-cd_app_1"},
		{sdCg, "podvisor.slice/podvisor-burstable.slice/podvisor-burstable-podab_cd.slice/podvisor-ab-cd_app_1.scope"},
		{sdSpec, "podvisor-burstable-podab_cd.slice:podvisor:ab-cd_app_1"},
	} {
		if c.got != c.want {
			t.Errorf("got %s, want %s", c.got, c.want)
		}
	}
}
