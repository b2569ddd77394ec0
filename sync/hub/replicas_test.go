package hub_test

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// The PostgreSQL server the replica tests share stops when they end.
func TestMain(m *testing.M) { pgtest.Main(m) }

// pgReplica is one replica on a PostgreSQL store: a hub (its broker
// unreachable: nothing here needs one) with its elector, and its API.
type pgReplica struct {
	fleet   *fleetdb.Fleet
	hub     *hub.Hub
	elector *replica.Elector
	api     http.Handler
}

func startPGReplica(t *testing.T, url, id string, key ed25519.PrivateKey) *pgReplica {
	t.Helper()
	fleet, err := fleetdb.OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	r := &pgReplica{fleet: fleet}
	r.hub = hub.New(hub.Config{Broker: "mqtt://127.0.0.1:1", Key: key, DeviceTimeout: time.Minute}, fleet, quiet())
	if r.elector, err = replica.New(replica.NewStore(fleet.SQL()), replica.Config{ID: id}); err != nil {
		t.Fatal(err)
	}
	r.hub.UseReplica(r.elector)
	if err := r.elector.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.elector.Stop() })
	if err := r.hub.Start(0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.hub.Close)
	r.api = r.hub.API(time.Minute).Handler()
	return r
}

// apply posts a file to the replica's API, as podhub apply does.
func (r *pgReplica) apply(t *testing.T, yaml string) {
	t.Helper()
	body, _ := json.Marshal(api.ObjectsRequest{File: "test.yaml", Data: []byte(yaml)})
	rec := httptest.NewRecorder()
	r.api.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/objects", bytes.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("apply through the API: %d %s", rec.Code, rec.Body)
	}
}

// within waits, at most limit, for ok, naming what it waits for, and
// says how long it took.
func within(t *testing.T, limit time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !ok() {
		if time.Since(start) > limit {
			t.Fatalf("%s: not within %s", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return time.Since(start)
}

// Two replicas on one PostgreSQL store: a Deployment applied through the
// API of the one that does not lead is scheduled by the leader's pass,
// which the change feed asked for (no periodic pass is left to do it).
// An apply of the ConfigMap its pods use, also through the replica that
// does not lead, reaches the index of the device they run on, which the
// leader's link made, and every replica's object link knows it: each
// reads the store again, told by the change feed.
func TestApplyThroughAReplicaThatDoesNotLeadIsScheduledByTheLeader(t *testing.T) {
	url := pgtest.URL(t)
	_, key, _ := ed25519.GenerateKey(nil)
	leader := startPGReplica(t, url, "leader", key)
	other := startPGReplica(t, url, "other", key)
	if !leader.elector.Leading() || other.elector.Leading() {
		t.Fatalf("leading: first replica %v, second %v; want the first only", leader.elector.Leading(), other.elector.Leading())
	}
	// A device Ready to take the pods, reported through the other replica.
	now := time.Now()
	if err := other.fleet.SetLabels("dev1", map[string]string{"zone": "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := other.fleet.SavePresence("dev1", &protocol.Presence{Device: "dev1", Online: true}, now); err != nil {
		t.Fatal(err)
	}
	node := v1.NodeStatus{
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")},
		Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
	}
	if _, _, err := other.fleet.SaveHeartbeat(&protocol.Heartbeat{Device: "dev1", Time: now, Node: node}, now); err != nil {
		t.Fatal(err)
	}

	other.apply(t, workloadfile.Deployment("web", 2, `
containers: [{name: c, image: "process:///bin/sleep", volumeMounts: [{name: cfg, mountPath: /cfg}]}]
volumes: [{name: cfg, configMap: {name: settings}}]`))
	took := within(t, 10*time.Second, "the leader's pass to bind web's 2 pods to dev1, applied through the other replica", func() bool {
		pods, err := leader.hub.Workloads().HubPods()
		if err != nil {
			t.Fatal(err)
		}
		bound := 0
		for _, p := range pods {
			if p.Spec.NodeName == "dev1" {
				bound++
			}
		}
		return bound == 2
	})
	t.Logf("a Deployment applied through the replica that does not lead was scheduled by the leader after %s", took)

	// The ConfigMap the pods use, applied through the other replica
	// (whose link never saw dev1's pods: the leader stored them).
	other.apply(t, `apiVersion: v1
kind: ConfigMap
metadata: {name: settings, namespace: default}
data: {mode: fast}
`)
	took = within(t, 10*time.Second, "dev1's stored object index to list the ConfigMap applied through the other replica", func() bool {
		stored, err := leader.fleet.ObjectIndexes()
		if err != nil {
			t.Fatal(err)
		}
		return slices.ContainsFunc(stored["dev1"].Entries, func(e protocol.ObjectEntry) bool { return e.Name == "settings" })
	})
	t.Logf("a ConfigMap applied through the replica that does not lead reached dev1's index after %s", took)
	// Each replica's link knows the index (it answers the device's
	// requests for objects against it): the leader's too.
	for name, r := range map[string]*pgReplica{"leader": leader, "other": other} {
		took = within(t, 10*time.Second, "the "+name+" replica's object link to know dev1's index listing the ConfigMap", func() bool {
			_, entries := r.hub.ObjectLink.Index("dev1")
			return slices.ContainsFunc(entries, func(e protocol.ObjectEntry) bool { return e.Name == "settings" })
		})
		t.Logf("the %s replica's object link knew dev1's new index %s later", name, took)
	}
}
