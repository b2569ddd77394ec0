package dashboard

import (
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/kubeapi"
	"github.com/podvisor/podvisor/sync/protocol"
)

// benchFleet is a fleet of devices with pods each, all Ready.
func benchFleet(b testing.TB, devices, pods int) *fleetdb.Fleet {
	f, err := fleetdb.Open(filepath.Join(b.TempDir(), "fleet.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	for i := range devices {
		id := fmt.Sprintf("dev-%04d", i)
		if err := f.SetLabels(id, map[string]string{"zone": fmt.Sprint("z", i%10)}); err != nil {
			b.Fatal(err)
		}
		f.SavePresence(id, &protocol.Presence{Device: id, Online: true}, now)
		if _, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: id, Version: "v1"}, now); err != nil {
			b.Fatal(err)
		}
		batch := &protocol.StatusBatch{Device: id, Epoch: "e"}
		for j := range pods {
			p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprint("pod-", j), CreationTimestamp: metav1.NewTime(now.Add(-time.Hour))},
				Spec: v1.PodSpec{Containers: []v1.Container{{Name: "main"}}},
				Status: v1.PodStatus{Phase: v1.PodRunning, ContainerStatuses: []v1.ContainerStatus{{Name: "main", Ready: true,
					State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}}
			batch.Items = append(batch.Items, protocol.StatusItem{Seq: int64(j + 1), Key: "default/" + p.Name, Pod: p})
		}
		if _, _, _, err := f.ApplyStatus(batch, now); err != nil {
			b.Fatal(err)
		}
	}
	return f
}

// The answers a page fetches for a fleet of 1,000 devices with 10 pods
// each (10,000 pods): what one load, and one live update, costs the hub.
func BenchmarkFleetAnswers(b *testing.B) {
	h := New(Config{Fleet: benchFleet(b, 1000, 10), Timeout: time.Minute, Now: func() time.Time { return now }})
	for _, path := range []string{"/ui/api/devices", "/ui/api/pods", "/ui/api/pods?q=pod-1&device=dev-0001", "/ui/api/devices/dev-0500"} {
		b.Run(path, func(b *testing.B) {
			var size int
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
				if rec.Code != 200 {
					b.Fatalf("%s: %d %s", path, rec.Code, rec.Body)
				}
				size = rec.Body.Len()
			}
			b.ReportMetric(float64(size), "bytes/answer")
		})
	}
}

// The pods page's answer for the same fleet read from the Kubernetes
// API's store in memory, as podhub serve wires it (Config.Pods), rather
// than from the fleet database.
func BenchmarkFleetPodsFromMemory(b *testing.B) {
	f := benchFleet(b, 1000, 10)
	clock := func() time.Time { return now }
	kube := kubeapi.New(kubeapi.Config{Fleet: f, Timeout: time.Minute, Now: clock})
	b.Cleanup(kube.Close)
	h := New(Config{Fleet: f, Timeout: time.Minute, Now: clock, Pods: kube.Pods})
	var size int
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/ui/api/pods", nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
		size = rec.Body.Len()
	}
	b.ReportMetric(float64(size), "bytes/answer")
}
