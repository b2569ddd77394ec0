package devmetrics

import (
	"fmt"
	"os"
	"path"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/cgroups"
	"github.com/podvisor/podvisor/metrics"
	"github.com/podvisor/podvisor/pod/resources"
	"github.com/podvisor/podvisor/pod/vocab"
)

// BenchmarkScrape50Pods is one /metrics scrape of a device with 50 pods
// of two containers, each with a readiness probe that ran: the cgroups
// are real (empty) ones when run as root, else a map. make bench reports
// it (docs/metrics.md, Costs).
func BenchmarkScrape50Pods(b *testing.B) {
	var stats StatsReader = fakeStats{}
	root := fmt.Sprintf("podvisor-devmetrics-bench-%d", os.Getpid())
	drv, err := cgroups.Detect("/sys/fs/cgroup")
	real := err == nil && os.Geteuid() == 0
	if real {
		stats = drv
		b.Cleanup(func() { drv.Remove(root) })
	}
	r := NewRecorder(time.Now())
	var pods []*v1.Pod
	var targets []PodTarget
	for i := range 50 {
		p := pod(fmt.Sprintf("pod-%02d", i), v1.PodRunning, 1, true)
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, v1.ContainerStatus{Name: "sidecar",
			State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}})
		pods = append(pods, p)
		t := PodTarget{UID: p.UID, Namespace: p.Namespace, Name: p.Name, Cgroup: path.Join(root, p.Name)}
		for _, c := range []string{"app", "sidecar"} {
			cg := path.Join(t.Cgroup, c)
			t.Containers = append(t.Containers, ContainerTarget{Name: c, Cgroup: cg, StartedAt: time.Now()})
			if real {
				if err := drv.Ensure(cg, resources.Limits{}); err != nil {
					b.Fatal(err)
				}
			} else {
				stats.(fakeStats)[cg] = cgroups.Stats{CPUUsageNanos: 1e9, MemoryWorkingSet: 1 << 20}
			}
		}
		if !real {
			stats.(fakeStats)[t.Cgroup] = cgroups.Stats{CPUUsageNanos: 2e9, MemoryWorkingSet: 2 << 20}
		}
		targets = append(targets, t)
	}
	r.Observe(pods, targets, stats, time.Now())
	for _, p := range pods {
		for _, c := range []string{"app", "sidecar"} {
			r.ProbeRan(vocab.InstanceID(types.UID(p.UID), c, 1), vocab.Readiness, true, time.Millisecond)
		}
	}
	c := NewCollector(r, Options{Version: "bench", Node: ProcNode{FsPath: b.TempDir()}})
	b.ReportAllocs()
	var size int
	for b.Loop() {
		var w metrics.Writer
		w.Grow(size * 9 / 8) // as the handler sizes it
		c.All(&w)
		size = len(w.Bytes())
	}
	b.ReportMetric(float64(size), "bytes/scrape")
	b.Logf("real cgroups: %v; exposition %d bytes", real, size)
}
