package fleetdb

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podvisor/podvisor/sync/protocol"

	"github.com/podvisor/podvisor/test/pgtest"
)

func testFleet(t *testing.T, devices ...string) *Fleet {
	t.Helper()
	f, err := OpenStore(pgtest.Store(t))
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

// The report paths run on statements prepared when the fleet opens.
func TestReportPathsUsePreparedStatements(t *testing.T) {
	pgtest.EachStore(t, testReportPathsUsePreparedStatements)
}

func testReportPathsUsePreparedStatements(t *testing.T) {
	f := testFleet(t, "dev")
	at := time.Unix(1700000000, 0)
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}}
	batches := []*protocol.StatusBatch{
		{Device: "dev", Epoch: "e1", After: 0, Items: []protocol.StatusItem{{Seq: 1, Key: "default/web", Pod: pod}, {Seq: 2, Key: "default/web", Event: &protocol.Event{Reason: "Killing"}}}},
		{Device: "dev", Epoch: "e1", After: 1, Items: []protocol.StatusItem{{Seq: 2, Key: "default/web", Event: &protocol.Event{Reason: "Killing"}}, {Seq: 3, Key: "default/web"}}},
		{Device: "dev", Epoch: "e2", After: 0, Items: []protocol.StatusItem{{Seq: 1, Key: "default/db", Pod: pod}}},
	}
	for i, b := range batches {
		cursor, _, gap, err := f.ApplyStatus(b, at)
		if err != nil || gap || cursor != b.Items[len(b.Items)-1].Seq {
			t.Fatalf("batch %d: cursor %d, gap %v, %v", i, cursor, gap, err)
		}
	}
	if err := f.SaveDesired(DesiredDoc{Device: "dev", Generation: 1, Document: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SaveAck(&protocol.Ack{Device: "dev", Generation: 1, ObservedGeneration: 1}, at); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: "dev", Instance: "i1"}, at); err != nil {
		t.Fatal(err)
	}
	if _, err := f.SavePresence("dev", &protocol.Presence{Online: true, Instance: "i2"}, at); err != nil {
		t.Fatal(err)
	}
	if n := f.stmts.Unprepared(); n != 0 {
		t.Fatalf("%d queries of the report paths were not prepared at open", n)
	}
}

// The bound on a device's mirrors holds across batches although the
// count is kept between them: removals free room, a replayed batch
// (QoS 1 redelivery) changes nothing, a new epoch starts from none.
func TestMirrorBoundAcrossBatches(t *testing.T) { pgtest.EachStore(t, testMirrorBoundAcrossBatches) }

func testMirrorBoundAcrossBatches(t *testing.T) {
	f := testFleet(t, "dev")
	f.SetRetention(Retention{Events: 10, Mirrors: 3})
	at := time.Unix(1700000000, 0)
	pod := func(seq int64, name string) protocol.StatusItem {
		return protocol.StatusItem{Seq: seq, Key: "default/" + name, Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}}}
	}
	keys := func() string {
		ms, err := f.Mirrors("dev")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			out = append(out, m.Key)
		}
		return fmt.Sprint(out)
	}
	steps := []struct {
		batch protocol.StatusBatch
		want  string
	}{
		{protocol.StatusBatch{Epoch: "e1", After: 0, Items: []protocol.StatusItem{pod(1, "a"), pod(2, "b")}}, "[default/a default/b]"},
		{protocol.StatusBatch{Epoch: "e1", After: 2, Items: []protocol.StatusItem{pod(3, "c"), pod(4, "d")}}, "[default/a default/b default/c]"},
		// Replayed: nothing new, the count unchanged.
		{protocol.StatusBatch{Epoch: "e1", After: 2, Items: []protocol.StatusItem{pod(3, "c"), pod(4, "d")}}, "[default/a default/b default/c]"},
		{protocol.StatusBatch{Epoch: "e1", After: 4, Items: []protocol.StatusItem{{Seq: 5, Key: "default/a"}, pod(6, "e"), pod(7, "f")}}, "[default/b default/c default/e]"},
		{protocol.StatusBatch{Epoch: "e2", After: 0, Items: []protocol.StatusItem{pod(1, "x"), pod(2, "y"), pod(3, "z")}}, "[default/x default/y default/z]"},
		{protocol.StatusBatch{Epoch: "e2", After: 3, Items: []protocol.StatusItem{pod(4, "w")}}, "[default/x default/y default/z]"},
	}
	for i, s := range steps {
		s.batch.Device = "dev"
		if _, _, gap, err := f.ApplyStatus(&s.batch, at); err != nil || gap {
			t.Fatalf("step %d: gap %v, %v", i, gap, err)
		}
		if got := keys(); got != s.want {
			t.Fatalf("step %d: mirrors %s, want %s", i, got, s.want)
		}
	}
}

// A mirror stores a pod's newest status whichever statement a pod's
// status tries first (an update of a known pod or an insert of a new
// one): new and known pods alternate in a batch, a pod reported twice
// keeps its later status, and at the bound a known pod is still updated
// while a new one is refused.
func TestMirrorUpdateOrInsert(t *testing.T) { pgtest.EachStore(t, testMirrorUpdateOrInsert) }

func testMirrorUpdateOrInsert(t *testing.T) {
	f := testFleet(t, "dev")
	f.SetRetention(Retention{Events: 10, Mirrors: 3})
	at := time.Unix(1700000000, 0)
	pod := func(seq int64, name string, phase v1.PodPhase) protocol.StatusItem {
		return protocol.StatusItem{Seq: seq, Key: "default/" + name, Pod: &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Status: v1.PodStatus{Phase: phase}}}
	}
	mirrors := func() string {
		ms, err := f.Mirrors("dev")
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ms {
			var p v1.Pod
			if err := json.Unmarshal(m.Pod, &p); err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s@%d:%s", m.Key, m.Seq, p.Status.Phase))
		}
		return fmt.Sprint(out)
	}
	steps := []struct {
		batch protocol.StatusBatch
		want  string
	}{
		{protocol.StatusBatch{Epoch: "e1", After: 0, Items: []protocol.StatusItem{
			pod(1, "a", v1.PodPending), pod(2, "a", v1.PodRunning), pod(3, "b", v1.PodPending)}},
			"[default/a@2:Running default/b@3:Pending]"},
		{protocol.StatusBatch{Epoch: "e1", After: 3, Items: []protocol.StatusItem{
			pod(4, "b", v1.PodRunning), pod(5, "c", v1.PodPending), pod(6, "a", v1.PodFailed), pod(7, "d", v1.PodPending), pod(8, "c", v1.PodRunning)}},
			"[default/a@6:Failed default/b@4:Running default/c@8:Running]"},
	}
	for i, s := range steps {
		s.batch.Device = "dev"
		if _, _, gap, err := f.ApplyStatus(&s.batch, at); err != nil || gap {
			t.Fatalf("step %d: gap %v, %v", i, gap, err)
		}
		if got := mirrors(); got != s.want {
			t.Fatalf("step %d: mirrors %s, want %s", i, got, s.want)
		}
	}
}

// Select matches the labels a device listing shows: the operator's, and
// the device's own under DeviceLabelPrefix, the operator's winning.
func TestSelectMatchesTheListedLabels(t *testing.T) {
	pgtest.EachStore(t, testSelectMatchesTheListedLabels)
}

func testSelectMatchesTheListedLabels(t *testing.T) {
	f := testFleet(t, "a", "b", "c")
	at := time.Unix(1700000000, 0)
	own := protocol.DeviceLabelPrefix + "site"
	for dev, site := range map[string]string{"a": "north", "b": "north", "c": "south"} {
		if _, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: dev, Labels: map[string]string{own: site}}, at); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.SetLabels("a", map[string]string{"fleet": "bench"}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetLabels("b", map[string]string{"fleet": "bench", own: "south"}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		selector map[string]string
		want     string
	}{
		{map[string]string{"fleet": "bench"}, "[a b]"},
		{map[string]string{own: "north"}, "[a]"},
		{map[string]string{own: "south"}, "[b c]"},
		{map[string]string{"fleet": "bench", own: "south"}, "[b]"},
		{map[string]string{"fleet": "idle"}, "[]"},
	} {
		ids, err := f.Select(c.selector)
		if err != nil {
			t.Fatal(err)
		}
		ds, _ := f.Devices(at, time.Hour)
		var listed []string
		for _, d := range ds {
			match := true
			for k, v := range c.selector {
				match = match && d.Labels[k] == v
			}
			if match {
				listed = append(listed, d.ID)
			}
		}
		if fmt.Sprint(ids) != c.want || fmt.Sprint(listed) != c.want {
			t.Errorf("select %v: %v (the listing matches %v), want %s", c.selector, ids, listed, c.want)
		}
	}
}
