package fleetdb

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// BenchmarkApplyStatus stores batches of 100 statuses of distinct pods,
// each Running and Ready with one container, as devices send them: the
// hub's side of the status path (make bench-hub times the whole of it).
// The metric is statuses stored per second.
func BenchmarkApplyStatus(b *testing.B) { benchApplyStatus(b, filepath.Join(b.TempDir(), "fleet.db")) }

// BenchmarkApplyStatusPostgres is BenchmarkApplyStatus on PostgreSQL
// (test/pgtest's private server: fsync off, on the same machine).
func BenchmarkApplyStatusPostgres(b *testing.B) { benchApplyStatus(b, pgtest.URL(b)) }

// BenchmarkApplyStatusPostgresOneByOne is BenchmarkApplyStatusPostgres
// with every item its own statements, as before multi-row batches
// (statusbatch.go): the two side by side in one run.
func BenchmarkApplyStatusPostgresOneByOne(b *testing.B) {
	defer func(was int) { batchedFrom = was }(batchedFrom)
	batchedFrom = 1 << 30
	benchApplyStatus(b, pgtest.URL(b))
}

func benchApplyStatus(b *testing.B, store string) {
	f, err := OpenStore(store)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := f.AddDevice("dev"); err != nil {
		b.Fatal(err)
	}
	const pods, perBatch = 1000, 100
	f.SetRetention(Retention{Events: 1000, Mirrors: pods})
	at := time.Unix(1700000000, 0)
	items := make([]protocol.StatusItem, 0, pods)
	for i := range pods {
		name := fmt.Sprintf("pod-%05d", i)
		p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Status: v1.PodStatus{Phase: v1.PodRunning,
				Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
				ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, RestartCount: 1,
					State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}}
		items = append(items, protocol.StatusItem{Key: "default/" + name, Pod: p})
	}
	seq := int64(0)
	b.ResetTimer()
	for range b.N {
		for start := 0; start < pods; start += perBatch {
			batch := &protocol.StatusBatch{Device: "dev", Epoch: "e1", After: seq}
			for _, it := range items[start : start+perBatch] {
				seq++
				it.Seq = seq
				batch.Items = append(batch.Items, it)
			}
			if _, _, gap, err := f.ApplyStatus(batch, at); err != nil || gap {
				b.Fatal(gap, err)
			}
		}
	}
	b.ReportMetric(float64(b.N*pods)/b.Elapsed().Seconds(), "statuses/s")
}

// BenchmarkApplyStatusPostgresDevices stores one-status batches (a
// device's report of one pod's change, the fleet's common batch) of 8
// devices at once, each device's in order on a goroutine of its own,
// as replicas (or one replica's several connections) do: what the
// device reports' shared writer lock lets run side by side
// (sqldb/postgres). The metric is statuses stored per second.
func BenchmarkApplyStatusPostgresDevices(b *testing.B) {
	f, err := OpenStore(pgtest.URL(b))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	const devices, pods = 8, 5
	at := time.Unix(1700000000, 0)
	for d := range devices {
		if err := f.AddDevice(fmt.Sprintf("dev-%d", d)); err != nil {
			b.Fatal(err)
		}
	}
	pod := func(name string, restarts int32) *v1.Pod {
		return &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Status: v1.PodStatus{Phase: v1.PodRunning,
				Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
				ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, RestartCount: restarts,
					State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}}
	}
	b.ResetTimer()
	var wg sync.WaitGroup
	errs := make(chan error, devices)
	for d := range devices {
		n := b.N / devices
		if d < b.N%devices {
			n++
		}
		wg.Go(func() {
			device := fmt.Sprintf("dev-%d", d)
			for seq := int64(1); seq <= int64(n); seq++ {
				name := fmt.Sprintf("pod-%d", seq%pods)
				batch := &protocol.StatusBatch{Device: device, Epoch: "e1", After: seq - 1,
					Items: []protocol.StatusItem{{Seq: seq, Key: "default/" + name, Pod: pod(name, int32(seq))}}}
				if _, _, gap, err := f.ApplyStatus(batch, at); err != nil || gap {
					errs <- fmt.Errorf("device %s batch %d: gap %v, %v", device, seq, gap, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "statuses/s")
}
