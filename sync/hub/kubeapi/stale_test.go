package kubeapi

import (
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
)

// The refresher waits for the first Ready device's deadline, not a
// fixed period: from the fixture's clock, a device heard from a second
// ago goes stale in the timeout less that second.
func TestRefresherWaitsForTheFirstDeadline(t *testing.T) {
	f := newFixture(t, Config{Timeout: 90 * time.Second})
	f.device("dev1", nil)
	f.api.ensureStarted()
	if got, want := f.api.ref.untilStale(), 89*time.Second+staleMargin; got != want {
		t.Fatalf("waits %s, want %s (dev1's deadline)", got, want)
	}
	f.advance(2 * time.Minute)
	if got := f.api.ref.untilStale(); got != staleMargin {
		t.Fatalf("past the deadline it waits %s, want %s", got, staleMargin)
	}
}

// A device that goes silent publishes nothing; its node turns NotReady
// when its deadline passes, though the safety net's period is an hour.
func TestSilentDeviceTurnsNotReadyAtItsDeadline(t *testing.T) {
	fleet, err := fleetdb.Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	// Any timeout far under the hour's resync shows the deadline acted;
	// 3 s leaves the two writes and the API's first load room on a
	// loaded machine before the node is first read.
	timeout := 3 * time.Second
	api := New(Config{Fleet: fleet, Timeout: timeout, Resync: time.Hour})
	defer api.Close()
	if err := fleet.AddDevice("quiet"); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := fleet.SavePresence("quiet", &protocol.Presence{Online: true}, now); err != nil {
		t.Fatal(err)
	}
	node := v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}}}
	if _, _, err := fleet.SaveHeartbeat(&protocol.Heartbeat{Device: "quiet", Node: node}, now); err != nil {
		t.Fatal(err)
	}
	api.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/v1/nodes", nil))
	ready := func() v1.ConditionStatus {
		o := api.store.get(resNodes, "", "quiet")
		if o == nil {
			return "missing"
		}
		for _, c := range o.obj.(*v1.Node).Status.Conditions {
			if c.Type == v1.NodeReady {
				return c.Status
			}
		}
		return "none"
	}
	if s := ready(); s != v1.ConditionTrue {
		t.Fatalf("quiet's node Ready=%s at first, want True", s)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ready() == v1.ConditionTrue {
		if time.Now().After(deadline) {
			t.Fatalf("quiet's node still Ready 10 s after its %s timeout passed unheard from", timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if took := time.Since(now); took < timeout {
		t.Fatalf("quiet turned NotReady after %s, before its %s timeout", took, timeout)
	}
}
