package hubmetrics

import (
	"context"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"
)

// benchFleet is a fleet of n devices, each online with a heartbeat
// (node status and a full metrics snapshot) and pods mirror pods.
func benchFleet(b *testing.B, n, pods int) *fleet {
	b.Helper()
	f := newFleet(b)
	node := v1.NodeStatus{
		Capacity:    v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("4Gi"), v1.ResourcePods: resource.MustParse("110")},
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("4"), v1.ResourceMemory: resource.MustParse("3Gi"), v1.ResourcePods: resource.MustParse("110")},
		NodeInfo:    v1.NodeSystemInfo{Architecture: "arm64", OperatingSystem: "linux", KernelVersion: "6.1.0", OSImage: "Debian GNU/Linux 12"},
	}
	for _, c := range []v1.NodeConditionType{v1.NodeReady, v1.NodeMemoryPressure, v1.NodeDiskPressure, v1.NodePIDPressure} {
		node.Conditions = append(node.Conditions, v1.NodeCondition{Type: c, Status: v1.ConditionFalse, Reason: "KubeletHasSufficientMemory", Message: "kubelet has sufficient memory available"})
	}
	for i := range n {
		id := fmt.Sprintf("dev-%04d", i)
		snap := &protocol.MetricsSnapshot{Since: 1799990000, RunningPods: pods, RunningContainers: pods, Evictions: uint64(i), PodsCPUSeconds: 100,
			PodsMemoryWorkingSet: 100 << 20, NodeMemoryWorkingSet: 500 << 20, NodeMemoryAvailable: 3 << 30, NodeFsAvailable: 10 << 30,
			Pressure: &protocol.PressureSnapshot{CPU: 1, Memory: 2, IO: 3}, OutboxDepth: 1}
		f.must(f.db.AddDevice(id))
		_, err := f.db.SavePresence(id, &protocol.Presence{Device: id, Online: true}, f.now)
		f.must(err)
		_, _, err = f.db.SaveHeartbeat(&protocol.Heartbeat{Device: id, Version: "v1.2.3", Node: node, Metrics: snap}, f.now)
		f.must(err)
		batch := &protocol.StatusBatch{Device: id, Epoch: "e1"}
		for p := range pods {
			name := fmt.Sprintf("pod-%d", p)
			batch.Items = append(batch.Items, protocol.StatusItem{Seq: int64(p + 1), Key: "default/" + name,
				Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Status: v1.PodStatus{Phase: v1.PodRunning}}})
		}
		_, err = f.db.StoreStatus(batch, f.now)
		f.must(err)
	}
	return f
}

// BenchmarkScrape1000Devices is one scrape of a fleet of 1,000 devices
// with 10 pods each (10,000 pods), every device sending a snapshot.
func BenchmarkScrape1000Devices(b *testing.B) {
	f := benchFleet(b, 1000, 10)
	m := f.metrics(nil)
	body, err := m.Exposition(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(body)), "bytes/scrape")
	for b.Loop() {
		if _, err := m.Exposition(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}
