package fleetdb

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// A batch stored in multi-row statements leaves the store as one item a
// statement does: the same mirrors (summaries, Ready since, the bound
// on made-up pods), events, cursor and answers, over random batches of
// statuses, removals, events, replays and new epochs.
func TestBatchedStatusesAsOneByOne(t *testing.T) { pgtest.EachStore(t, testBatchedStatusesAsOneByOne) }

func testBatchedStatusesAsOneByOne(t *testing.T) {
	defer func(was int, sqlite bool) { batchedFrom, batchedOnSQLite = was, sqlite }(batchedFrom, batchedOnSQLite)
	batchedOnSQLite = true
	rnd := rand.New(rand.NewSource(29))
	batches := randomBatches(rnd, 300)
	one, many := testFleet(t, "dev"), testFleetAgain(t, "dev")
	for _, f := range []*Fleet{one, many} {
		f.SetRetention(Retention{Events: 20, Mirrors: 4})
	}
	at := time.Unix(1700000000, 0)
	for i, b := range batches {
		at = at.Add(time.Duration(rnd.Intn(3)) * time.Second)
		batchedFrom = 1 << 30
		r1, err1 := one.StoreStatus(b, at)
		batchedFrom = 1
		r2, err2 := many.StoreStatus(b, at)
		if err1 != nil || err2 != nil {
			t.Fatalf("batch %d: %v / %v", i, err1, err2)
		}
		if r1 != r2 {
			t.Fatalf("batch %d %+v: one by one %+v, batched %+v", i, b, r1, r2)
		}
		if d1, d2 := dumpReports(t, one), dumpReports(t, many); !reflect.DeepEqual(d1, d2) {
			t.Fatalf("batch %d %+v: one by one stored\n%v\nbatched\n%v", i, b, d1, d2)
		}
	}
}

// testFleetAgain is a second fleet in another store of the kind
// testFleet opens: a new SQLite file, or a new PostgreSQL database.
func testFleetAgain(t *testing.T, devices ...string) *Fleet {
	t.Helper()
	store := pgtest.Store(t)
	if postgres.IsURL(store) {
		store = pgtest.URL(t)
	}
	f, err := OpenStore(store)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	for _, d := range devices {
		if err := f.AddDevice(d); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

// randomBatches are n batches of one device's outbox as a device (or a
// broker redelivering) may send them.
func randomBatches(rnd *rand.Rand, n int) []*protocol.StatusBatch {
	var out []*protocol.StatusBatch
	epoch, seq := "e1", int64(0)
	for range n {
		switch r := rnd.Intn(20); {
		case r == 0 && len(out) > 0: // a redelivered batch
			out = append(out, out[rnd.Intn(len(out))])
			continue
		case r == 1: // a new outbox
			epoch, seq = fmt.Sprintf("e%d", rnd.Int()), 0
		}
		b := &protocol.StatusBatch{Device: "dev", Epoch: epoch, After: seq}
		for range 1 + rnd.Intn(8) {
			seq++
			key := fmt.Sprintf("default/p%d", rnd.Intn(6))
			it := protocol.StatusItem{Seq: seq, Key: key}
			switch k := rnd.Intn(10); {
			case k < 2:
				it.Event = &protocol.Event{Reason: fmt.Sprintf("R%d", rnd.Intn(3)), Message: key}
			case k < 4: // removed
			default:
				it.Pod = randomPod(rnd, key)
			}
			b.Items = append(b.Items, it)
		}
		out = append(out, b)
	}
	return out
}

func randomPod(rnd *rand.Rand, key string) *v1.Pod {
	ready := v1.ConditionFalse
	if rnd.Intn(2) == 0 {
		ready = v1.ConditionTrue
	}
	p := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: key[len("default/"):], Namespace: "default"},
		Status: v1.PodStatus{Phase: []v1.PodPhase{v1.PodRunning, v1.PodPending, v1.PodFailed}[rnd.Intn(3)],
			Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: ready}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", RestartCount: int32(rnd.Intn(3)),
				State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}}
	if rnd.Intn(4) == 0 {
		p.Status.ContainerStatuses[0].State = v1.ContainerState{Waiting: &v1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}
	}
	if rnd.Intn(2) == 0 {
		p.Annotations = map[string]string{AnnotationScheduled: "true"}
	}
	return p
}

// dumpReports is what the store holds of the device's reports.
func dumpReports(t *testing.T, f *Fleet) []string {
	t.Helper()
	var out []string
	rows, err := f.db.Query(`SELECT key, seq, pod, ready, ready_since, phase, restarts, failure, summary_at, scheduled FROM mirrors ORDER BY key`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var key, phase, failure string
		var pod []byte
		var seq, ready, since, restarts, summaryAt, scheduled int64
		if err := rows.Scan(&key, &seq, &pod, &ready, &since, &phase, &restarts, &failure, &summaryAt, &scheduled); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("mirror %s seq %d ready %d since %d phase %s restarts %d failure %q at %d scheduled %d pod %s",
			key, seq, ready, since, phase, restarts, failure, summaryAt, scheduled, pod))
	}
	rows.Close()
	rows, err = f.db.Query(`SELECT seq, key, event, at FROM events ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq, at int64
		var key string
		var ev []byte
		if err := rows.Scan(&seq, &key, &ev, &at); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprintf("event %d %s %s %d", seq, key, ev, at))
	}
	rows.Close()
	epoch, seq, err := f.Cursor("dev")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, fmt.Sprintf("cursor %s %d", epoch, seq))
}
