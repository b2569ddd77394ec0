package fleetdb

import (
	"fmt"
	"path/filepath"
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
