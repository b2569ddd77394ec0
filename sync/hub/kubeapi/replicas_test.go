package kubeapi

import (
	"path/filepath"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/test/pgtest"
)

// The PostgreSQL server the tests share stops when they end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// Two replicas on one PostgreSQL store: what a device reports through
// replica A (its node, a pod's status, then a restart) is served by the
// Kubernetes API of replica B, which hears of it through the store's
// change notifications, not by polling (its resync is an hour away).
func TestAPIOnOneReplicaServesWhatAnotherStored(t *testing.T) {
	url := pgtest.URL(t)
	var fleets [2]*fleetdb.Fleet
	for i := range fleets {
		f, err := fleetdb.OpenStore(url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fleets[i] = f
	}
	a := &fixture{t: t, fleet: fleets[0], now: t0, seq: map[string]int64{}}
	b := newFixtureOn(t, fleets[1], Config{})
	// B's API started: it subscribed to its feed, which returned once B
	// listened, so all that follows reaches it only as notifications.
	if names := b.podNames("/api/v1/pods"); names != "" {
		t.Fatalf("pods on an empty fleet: %q", names)
	}

	start := time.Now()
	a.device("dev1", nil)
	a.report("dev1", podItem(filePod("web", 0)))
	var pod v1.Pod
	b.eventually("replica B's API to serve web-dev1, reported through replica A", func() bool {
		code, _ := b.get("/api/v1/namespaces/default/pods/web-dev1", "")
		return code == 200
	})
	t.Logf("a device and its pod stored through replica A were served by replica B's API after %s", time.Since(start))
	b.getJSON("/api/v1/namespaces/default/pods/web-dev1", "", &pod)
	if pod.Status.Phase != v1.PodRunning || pod.Spec.NodeName != "dev1" {
		t.Fatalf("replica B serves web-dev1 %s on %q, want Running on dev1", pod.Status.Phase, pod.Spec.NodeName)
	}
	var node v1.Node
	b.getJSON("/api/v1/nodes/dev1", "", &node)
	if node.Name != "dev1" {
		t.Fatalf("replica B serves node %q, want dev1", node.Name)
	}

	start = time.Now()
	a.report("dev1", podItem(filePod("web", 3)))
	b.eventually("replica B's API to serve web-dev1's restart count 3, stored through replica A", func() bool {
		b.getJSON("/api/v1/namespaces/default/pods/web-dev1", "", &pod)
		return len(pod.Status.ContainerStatuses) == 1 && pod.Status.ContainerStatuses[0].RestartCount == 3
	})
	t.Logf("a pod status change stored through replica A was served by replica B's API after %s", time.Since(start))
}

// An Everything change (the feed lost other replicas' changes for a
// while) re-reads the whole fleet: a device and pod stored unannounced
// (through a second handle of the SQLite file, whose writes this feed
// never hears) are served after it, not before.
func TestEverythingChangeResyncsTheAPI(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	var handles [2]*fleetdb.Fleet
	for i := range handles {
		h, err := fleetdb.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		handles[i] = h
	}
	f := newFixtureOn(t, handles[0], Config{})
	if names := f.podNames("/api/v1/pods"); names != "" {
		t.Fatalf("pods on an empty fleet: %q", names)
	}
	unannounced := &fixture{t: t, fleet: handles[1], now: t0, seq: map[string]int64{}}
	unannounced.device("dev1", nil)
	unannounced.report("dev1", podItem(filePod("web", 0)))
	if names := f.podNames("/api/v1/pods"); names != "" {
		t.Fatalf("pods served before any change was told: %q", names)
	}
	f.fleet.Changes().Deliver("", fleetwatch.Everything)
	f.eventually("the API to serve web-dev1 after an Everything change", func() bool {
		return f.podNames("/api/v1/pods") == "default/web-dev1"
	})
}
