package hub_test

import (
	"encoding/json"
	"testing"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// What a pass remembers for the next is checked against the database:
// a steady pass signs nothing again; a document changed behind its back
// (a hand-applied pod, or its scheduled pods lost) is read again, kept
// when its scheduled pods are still right and mended when not.
func TestSchedulePassCacheFollowsTheDatabase(t *testing.T) {
	r := newSchedRig(t, map[string]string{"d1": "a", "d2": "b"})
	r.apply(workloadfile.DaemonSet("agent", `containers: [{name: c, image: "process:///bin/sleep", args: ["1000"]}]`))
	r.pass()
	generation := func(id string) int64 {
		t.Helper()
		d, err := r.fleet.Desired(id)
		if err != nil {
			t.Fatal(err)
		}
		return d.Generation
	}
	if g := generation("d1"); g != 1 {
		t.Fatalf("d1 at generation %d after the first pass, want 1", g)
	}
	r.pass()
	if g := generation("d1"); g != 1 {
		t.Fatalf("d1 at generation %d after a steady pass, want 1", g)
	}

	// A hand-applied pod beside the scheduled one: the document changed,
	// its scheduled pods did not; the pass leaves it.
	pod := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"byhand"},"spec":{"containers":[{"name":"c","image":"process:///bin/sleep"}]}}`)
	if _, err := r.hub.Apply("d1", []json.RawMessage{pod}); err != nil {
		t.Fatal(err)
	}
	r.pass()
	if g := generation("d1"); g != 2 {
		t.Fatalf("d1 at generation %d after a hand apply and a pass, want 2", g)
	}
	if d, _ := r.fleet.Desired("d1"); len(d.Pods) != 2 {
		t.Fatalf("d1 desired %s, want the agent and the hand-applied pod", d.Pods)
	}

	// The document stored without its scheduled pod (as an old backup
	// restored would): the pass puts it back.
	d, _ := r.fleet.Desired("d2")
	if err := r.fleet.SaveDesired(fleetdb.DesiredDoc{Device: "d2", Generation: d.Generation + 1, Pods: []json.RawMessage{}, Document: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	r.pass()
	if apps := r.desired("d2"); len(apps) != 1 || apps[0] != "agent" {
		t.Fatalf("d2 desired %v after its scheduled pod was lost, want the agent back", apps)
	}
}
