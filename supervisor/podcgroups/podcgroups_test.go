package podcgroups

import (
	"bytes"
	"errors"
	"log/slog"
	"path"
	"slices"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/supervisor/runtime"
)

// fakeDriver is a cgroup hierarchy in memory: what was made, killed and
// removed, and the OOM kills the kernel counted in each cgroup.
type fakeDriver struct {
	ensured map[string]resources.Limits
	killed  []string
	removed []string
	oom     map[string]uint64
	killErr error
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{ensured: map[string]resources.Limits{}, oom: map[string]uint64{}}
}

func (f *fakeDriver) Version() int { return 2 }
func (f *fakeDriver) Ensure(p string, l resources.Limits) error {
	f.ensured[p] = l
	return nil
}
func (f *fakeDriver) Placement(string) cgroups.Placement  { return cgroups.Placement{} }
func (f *fakeDriver) Kill(p string) error                 { f.killed = append(f.killed, p); return f.killErr }
func (f *fakeDriver) Remove(p string) error               { f.removed = append(f.removed, p); return nil }
func (f *fakeDriver) Stats(string) (cgroups.Stats, error) { return cgroups.Stats{}, nil }
func (f *fakeDriver) Procs(string) ([]int, error)         { return nil, nil }
func (f *fakeDriver) OOMKills(p string) (uint64, error)   { return f.oom[p], nil }

// fakeSystemd counts OOM kills per pod slice, as systemd's scopes may be
// gone when their container's death is judged.
type fakeSystemd struct{ *fakeDriver }

func (fakeSystemd) Place(string, resources.Limits, int) error { return nil }

// fakeRuntime places each container instance in a cgroup named after it,
// below its pod's; only InstanceCgroup is ever called.
type fakeRuntime struct {
	runtime.Runtime
	m *Manager
}

func (r fakeRuntime) InstanceCgroup(pod *v1.Pod, _, instanceID string) string {
	return path.Join(r.m.PodCgroup(pod), instanceID)
}

func testManager(drv cgroups.Driver) (*Manager, *bytes.Buffer) {
	var log bytes.Buffer
	m := New(Options{Root: "podvisor", Log: slog.New(slog.NewTextHandler(&log, nil))})
	m.Layout = cgroups.Layout{Root: "podvisor"}
	m.Driver = drv
	return m, &log
}

func testPod(uid types.UID) *v1.Pod {
	return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", UID: uid},
		Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Resources: v1.ResourceRequirements{
			Requests: v1.ResourceList{v1.ResourceCPU: resource.MustParse("250m")}}}}}}
}

// A pod's cgroup is made with the kubelet's limits once per pod instance,
// not at every container start.
func TestEnsurePodOnce(t *testing.T) {
	drv := newFakeDriver()
	m, _ := testManager(drv)
	pod := testPod("uid-1")
	for range 2 {
		if err := m.EnsurePod(pod); err != nil {
			t.Fatal(err)
		}
	}
	want := "podvisor/burstable/poduid-1"
	if l, ok := drv.ensured[want]; !ok || len(drv.ensured) != 1 || l != resources.PodLimits(pod, 0) {
		t.Fatalf("ensured %v, want %s with the pod's limits once", drv.ensured, want)
	}
	delete(drv.ensured, want)
	m.RemovePod(pod.UID)
	if err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	if _, ok := drv.ensured[want]; !ok {
		t.Fatal("a pod instance after its removal got no cgroup")
	}
}

// Without cgroups everything is a no-op.
func TestWithoutCgroups(t *testing.T) {
	var log bytes.Buffer
	m := New(Options{Mount: "/sys/fs/cgroup", Log: slog.New(slog.NewTextHandler(&log, nil))})
	if err := m.Setup(); err != nil {
		t.Fatal(err)
	}
	if m.Driver != nil || m.Mount != "/sys/fs/cgroup" || !strings.Contains(log.String(), "running without cgroups") {
		t.Fatalf("setup without a root: driver %v, mount %q, log %s", m.Driver, m.Mount, log.String())
	}
	pod := testPod("uid-1")
	rt := fakeRuntime{m: m}
	if err := m.EnsurePod(pod); err != nil {
		t.Fatal(err)
	}
	if got := m.InstanceStarting(rt, pod, "app", "i1"); got != "" {
		t.Fatalf("instance cgroup %q without cgroups", got)
	}
	m.Killer(rt, pod, "app", "i1")()
	if m.OOMKilled(rt, pod, "app", "i1") {
		t.Fatal("OOMKilled without cgroups")
	}
	m.OOMJudged(pod)
	m.RemovePod(pod.UID)
}

// With a counter per container, an exit is judged by the kills since its
// own start.
func TestOOMKilledSinceStart(t *testing.T) {
	drv := newFakeDriver()
	m, _ := testManager(drv)
	rt := fakeRuntime{m: m}
	pod := testPod("uid-1")
	cgroup := "podvisor/burstable/poduid-1/i1"
	drv.oom[cgroup] = 2 // an earlier instance's, in a reused cgroup
	if got := m.InstanceStarting(rt, pod, "app", "i1"); got != cgroup {
		t.Fatalf("instance cgroup %q, want %q", got, cgroup)
	}
	if m.OOMKilled(rt, pod, "app", "i1") {
		t.Fatal("kills before the start were taken for this instance's")
	}
	drv.oom[cgroup]++
	if !m.OOMKilled(rt, pod, "app", "i1") {
		t.Fatal("a kill since the start was missed")
	}
	if m.OOMKilled(nil, nil, "app", "i1") {
		t.Fatal("an instance no longer known was judged")
	}
}

// With a counter shared by the pod (systemd), a kill is settled on the
// container judged first: the next to die of SIGKILL is not its victim.
func TestOOMJudgedSharedCounter(t *testing.T) {
	drv := newFakeDriver()
	m, _ := testManager(fakeSystemd{drv})
	rt := fakeRuntime{m: m}
	pod, other := testPod("uid-1"), testPod("uid-2")
	m.InstanceStarting(rt, pod, "app", "a")
	m.InstanceStarting(rt, pod, "sidecar", "b")
	m.InstanceStarting(rt, other, "app", "c")
	drv.oom["podvisor/burstable/poduid-1"] = 1
	drv.oom["podvisor/burstable/poduid-2"] = 1
	if !m.OOMKilled(rt, pod, "app", "a") {
		t.Fatal("the pod's kill was missed")
	}
	m.OOMJudged(pod)
	if m.OOMKilled(rt, pod, "sidecar", "b") {
		t.Fatal("one kill was taken for two victims")
	}
	if !m.OOMKilled(rt, other, "app", "c") {
		t.Fatal("another pod's kill was settled too")
	}
}

// A kill goes to where the pod's runtime put the container, or where the
// layout says when its runtime is gone; a failure is logged.
func TestKill(t *testing.T) {
	drv := newFakeDriver()
	m, log := testManager(drv)
	pod := testPod("uid-1")
	m.Killer(fakeRuntime{m: m}, pod, "app", "i1")()
	drv.killErr = errors.New("frozen")
	m.Killer(nil, pod, "app", "i1")()
	m.Killer(nil, nil, "app", "i1")()
	want := []string{"podvisor/burstable/poduid-1/i1", "podvisor/burstable/poduid-1/app"}
	if !slices.Equal(drv.killed, want) {
		t.Fatalf("killed %v, want %v", drv.killed, want)
	}
	if !strings.Contains(log.String(), "cgroup kill") || !strings.Contains(log.String(), "pod=default/web") {
		t.Fatalf("log %s", log.String())
	}
}

// Removing a pod removes its cgroup wherever its QoS class put it, and
// forgets its containers' OOM counts (not another pod's).
func TestRemovePod(t *testing.T) {
	drv := newFakeDriver()
	m, _ := testManager(drv)
	rt := fakeRuntime{m: m}
	pod, other := testPod("uid-1"), testPod("uid-2")
	m.InstanceStarting(rt, pod, "app", "a")
	m.InstanceStarting(rt, other, "app", "b")
	m.RemovePod(pod.UID)
	if want := m.Layout.Pods(pod.UID); !slices.Equal(drv.removed, want) {
		t.Fatalf("removed %v, want %v", drv.removed, want)
	}
	if _, kept := m.oomBase["podvisor/burstable/poduid-2/b"]; len(m.oomBase) != 1 || !kept {
		t.Fatalf("OOM bases left %v, want the other pod's only", m.oomBase)
	}
}
