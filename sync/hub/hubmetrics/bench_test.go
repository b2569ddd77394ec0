package hubmetrics

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// benchFleet is a fleet of n devices, each online with a heartbeat
// (node status and a full metrics snapshot), running pods hub pods it
// reports and one more it does not report yet.
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
	var hub workloaddb.PodWrites
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
			name := fmt.Sprintf("pod-%d-%s", p, id)
			pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default", Annotations: map[string]string{fleetdb.AnnotationScheduled: "true"}},
				Spec: v1.PodSpec{NodeName: id, Containers: []v1.Container{{Name: "app", Image: "app:1"}}}}
			raw, _ := json.Marshal(pod)
			hub.Put = append(hub.Put, workloaddb.PodWrite{Key: types.NamespacedName{Namespace: "default", Name: name}, Device: id, Raw: raw})
			pod.Status.Phase = v1.PodRunning
			batch.Items = append(batch.Items, protocol.StatusItem{Seq: int64(p + 1), Key: "default/" + name, Pod: pod})
		}
		_, err = f.db.StoreStatus(batch, f.now)
		f.must(err)
	}
	// The pods are the hub's, placed by its scheduler: each device
	// reports its own, and one more per device is not reported yet.
	for i := range n {
		id := fmt.Sprintf("dev-%04d", i)
		raw, _ := json.Marshal(&v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "new-" + id, Namespace: "default"}, Spec: v1.PodSpec{NodeName: id}})
		hub.Put = append(hub.Put, workloaddb.PodWrite{Key: types.NamespacedName{Namespace: "default", Name: "new-" + id}, Device: id, Raw: raw})
	}
	f.must(f.wl.StorePods(hub, f.now))
	return f
}

// BenchmarkScrape1000Devices is one scrape of a fleet of 1,000 devices
// with 10 hub pods each reported (10,000 pods) and 1,000 more not yet,
// every device sending a snapshot.
func BenchmarkScrape1000Devices(b *testing.B) {
	f := benchFleet(b, 1000, 10)
	m := f.metrics(nil)
	body, err := m.Exposition(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	if got := series(parse(b, body), "podhub_pods"); got["phase=Running"] != 10000 || got["phase=Pending"] != 1000 {
		b.Fatalf("podhub_pods %v, want 10,000 Running and 1,000 Pending", got)
	}
	for b.Loop() {
		if _, err := m.Exposition(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	var zipped bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&zipped, gzip.BestSpeed)
	zw.Write(body)
	zw.Close()
	b.ReportMetric(float64(len(body)), "bytes/exposition")
	b.ReportMetric(float64(zipped.Len()), "gzipped-bytes/exposition")
	b.ReportMetric(float64(bytes.Count(body, []byte("\n"))-2*len(Families())), "series")
}
