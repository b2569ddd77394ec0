package fleetdb

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/podvisor/podvisor/pod/manifest"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/protocol"

	"github.com/podvisor/podvisor/test/pgtest"
)

// A pod the device still reports but that the hub's documents no longer
// give it (deleted, or evicted by a taint, while the device was out of
// reach, so it never applied the document that dropped it) is named by
// the fence all the same: the device stops it before anything else, and
// the fence is not lifted while the device reports it. Its file pods are
// not named (a fence is the hub's word on its own pods).
func TestFenceNamesTheHubPodsTheDeviceStillReports(t *testing.T) {
	pgtest.EachStore(t, testFenceNamesTheHubPodsTheDeviceStillReports)
}

func testFenceNamesTheHubPodsTheDeviceStillReports(t *testing.T) {
	f := testFleet(t, "dev")
	t0 := time.Unix(1700000000, 0)
	db := statusPod("db-1", true, v1.PodRunning, 0, "")
	db.Annotations = map[string]string{manifest.AnnotationSource: "hub"} // placed by hand (apply --device): not scheduled
	agent := statusPod("agent-x", true, v1.PodRunning, 0, "")
	local := statusPod("local", true, v1.PodRunning, 0, "")
	local.Annotations = map[string]string{manifest.AnnotationSource: "file"}
	seq := int64(0)
	report := func(after int64, items ...protocol.StatusItem) {
		t.Helper()
		b := &protocol.StatusBatch{Device: "dev", Epoch: "e1", After: after}
		for _, it := range items {
			seq++
			it.Seq = seq
			b.Items = append(b.Items, it)
		}
		if r, err := f.StoreStatus(b, t0); err != nil || r.Gap {
			t.Fatalf("batch: %+v, %v", r, err)
		}
	}
	item := func(p *v1.Pod) protocol.StatusItem { return protocol.StatusItem{Key: "default/" + p.Name, Pod: p} }
	report(0, item(db), item(agent), item(local))
	// The hub's current document gives it the agent only (db-1 was
	// dropped after the device's last report).
	agentJSON, _ := json.Marshal(map[string]any{"metadata": map[string]string{"name": "agent-x"}})
	if err := f.SaveDesired(DesiredDoc{Device: "dev", Generation: 1, Pods: []json.RawMessage{agentJSON}, Document: []byte("{}")}); err != nil {
		t.Fatal(err)
	}

	if err := f.SetFenced("dev", t0); err != nil {
		t.Fatal(err)
	}
	s, err := f.Fence("dev")
	if err != nil || !s.Fenced() || fmt.Sprint(s.Pods) != "[default/agent-x default/db-1]" {
		t.Fatalf("fence %+v (%v), want the reported hub pods [default/agent-x default/db-1]", s, err)
	}
	cur, _ := f.Desired("dev")
	next := NextFence(s, cur.Pods)
	if fmt.Sprint(next.Pods) != "[default/agent-x default/db-1]" {
		t.Fatalf("the next document's fence names %v", next.Pods)
	}
	// Fencing again keeps the fence as the documents widened it.
	if err := f.SaveDesired(DesiredDoc{Device: "dev", Generation: 2, Pods: []json.RawMessage{}, Document: []byte("{}"), Fence: next}); err != nil {
		t.Fatal(err)
	}
	if err := f.SetFenced("dev", t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if s2, _ := f.Fence("dev"); !s2.Since.Equal(s.Since) || fmt.Sprint(s2.Pods) != fmt.Sprint(next.Pods) || s2.Generation != 2 {
		t.Fatalf("fenced again: %+v, want %+v at generation 2", s2, s)
	}

	// Applied, the agent reported gone but db-1 still stopping: the fence
	// holds.
	if _, err := f.SaveAck(&protocol.Ack{Device: "dev", Generation: 2, ObservedGeneration: 2}, t0); err != nil {
		t.Fatal(err)
	}
	report(seq, protocol.StatusItem{Key: "default/agent-x"})
	if err := f.Unfence("dev"); !errors.Is(err, ErrFenceNotDelivered) {
		t.Fatalf("unfence while the device reports db-1: %v, want ErrFenceNotDelivered", err)
	}
	report(seq, protocol.StatusItem{Key: "default/db-1"})
	if err := f.Unfence("dev"); err != nil {
		t.Fatalf("unfence once the device reports none of the fenced pods: %v", err)
	}
}
