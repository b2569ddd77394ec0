package workloaddb_test

import (
	"encoding/json"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"

	"github.com/podvisor/podvisor/test/pgtest"
)

func testStore(t *testing.T) *workloaddb.Store {
	t.Helper()
	f, err := fleetdb.OpenStore(pgtest.Store(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return workloaddb.New(f.SQL())
}

// A pass's writes land together: pods put (replacing by key, with their
// device) and deleted, events recorded and a deleted pod's forgotten.
func TestStorePods(t *testing.T) { pgtest.EachStore(t, testStorePods) }

func testStorePods(t *testing.T) {
	s := testStore(t)
	at := time.Unix(1700000000, 0)
	k := func(name string) types.NamespacedName { return types.NamespacedName{Namespace: "default", Name: name} }
	raw := func(name, device string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]string{"namespace": "default", "name": name},
			"spec": map[string]string{"nodeName": device}})
		return b
	}
	event := func(name, reason string) workloaddb.SchedEvent {
		return workloaddb.SchedEvent{Kind: "Pod", Namespace: "default", Name: name, Type: "Normal", Reason: reason}
	}
	if err := s.StorePods(workloaddb.PodWrites{
		Put:    []workloaddb.PodWrite{{Key: k("b"), Device: "d1", Raw: raw("b", "d1")}, {Key: k("a"), Raw: raw("a", "")}},
		Events: []workloaddb.SchedEvent{event("a", "Scheduled"), event("b", "Scheduled")},
	}, at); err != nil {
		t.Fatal(err)
	}
	if err := s.StorePods(workloaddb.PodWrites{
		Put:    []workloaddb.PodWrite{{Key: k("a"), Device: "d2", Raw: raw("a", "d2")}},
		Delete: []types.NamespacedName{k("b")},
	}, at); err != nil {
		t.Fatal(err)
	}
	var seen []string
	if err := s.EachHubPod(func(key types.NamespacedName, b []byte) error {
		seen = append(seen, key.Name+"="+string(b))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(seen) != 1 || seen[0] != "a="+string(raw("a", "d2")) {
		t.Fatalf("hub pods %v: want a, on d2", seen)
	}
	if evs, _ := s.ObjectEvents("Pod", "default", "b"); len(evs) != 0 {
		t.Fatalf("a deleted pod kept its events: %v", evs)
	}
	if evs, _ := s.ObjectEvents("Pod", "default", "a"); len(evs) != 1 || evs[0].Reason != "Scheduled" {
		t.Fatalf("events of a: %v", evs)
	}
	if idle, err := s.NothingToSchedule(); err != nil || idle {
		t.Fatalf("nothing to schedule: %v, %v", idle, err)
	}
}
