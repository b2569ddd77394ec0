package hub_test

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/podvisor/podvisor/sync/hub"
	"github.com/podvisor/podvisor/sync/hub/api"
	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
	"github.com/podvisor/podvisor/test/workloadfile"
)

// pgHub is a hub on a PostgreSQL store that runs no loop: its passes run
// when the test calls SchedulePass, its API when the test asks it.
func pgHub(t *testing.T, url string, key ed25519.PrivateKey) (*hub.Hub, *fleetdb.Fleet, http.Handler) {
	t.Helper()
	fleet, err := fleetdb.OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	h := hub.New(hub.Config{Broker: "mqtt://127.0.0.1:1", Key: key, DeviceTimeout: time.Minute}, fleet, quiet())
	return h, fleet, h.API(time.Minute).Handler()
}

// waitLocks waits, 10 s at most, until the server shows n lock requests
// not granted that match cond (pg_locks), naming what it waits for.
func waitLocks(t *testing.T, db *sql.DB, cond string, n int, what string, or <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got int
		if err := db.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE NOT granted AND ` + cond).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got >= n {
			return
		}
		select {
		case <-or:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited 10 s for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// An eviction through a replica that does not lead, committed while the
// leader's scheduling pass is between its reads and its writes, is not
// undone by that pass: the eviction waits for the pass (the scheduling
// lock in the database), then applies to what the pass stored. Without
// it, the pass read the pending pod, the eviction deleted it (201), and
// the pass stored it again, bound to its device: an evicted pod that
// runs. The pass is held between its reads and its writes by a lock on
// a table it reads last (revisions), the interleaving made certain.
func TestEvictionThroughAnotherReplicaIsNotUndoneByTheLeadersPass(t *testing.T) {
	url := pgtest.URL(t)
	_, key, _ := ed25519.GenerateKey(nil)
	leader, fleet, leaderAPI := pgHub(t, url, key)
	_, _, otherAPI := pgHub(t, url, key)

	apply, _ := json.Marshal(api.ObjectsRequest{File: "web.yaml",
		Data: []byte(workloadfile.Deployment("web", 1, `containers: [{name: c, image: "process:///bin/sleep"}]`))})
	rec := httptest.NewRecorder()
	leaderAPI.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/objects", bytes.NewReader(apply)))
	if rec.Code != http.StatusOK {
		t.Fatalf("apply: %d %s", rec.Code, rec.Body)
	}
	if _, err := leader.SchedulePass(); err != nil {
		t.Fatal(err)
	}
	pods, err := leader.Workloads().HubPods()
	if err != nil || len(pods) != 1 || pods[0].Spec.NodeName != "" {
		t.Fatalf("web's pod before any device: %v %v, want one pending", pods, err)
	}
	name := pods[0].Name

	// A device to bind it to.
	now := time.Now()
	if err := fleet.SetLabels("dev1", map[string]string{"zone": "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet.SavePresence("dev1", &protocol.Presence{Device: "dev1", Online: true}, now); err != nil {
		t.Fatal(err)
	}
	node := v1.NodeStatus{
		Allocatable: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1"), v1.ResourceMemory: resource.MustParse("1Gi")},
		Conditions:  []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue}},
	}
	if _, _, err := fleet.SaveHeartbeat(&protocol.Heartbeat{Device: "dev1", Time: now, Node: node}, now); err != nil {
		t.Fatal(err)
	}

	// The test's own connection holds the revisions table: the leader's
	// next pass reads the pods and devices, then waits there.
	raw, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	hold, err := raw.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	for _, q := range []string{`BEGIN`, `LOCK TABLE revisions IN ACCESS EXCLUSIVE MODE`} {
		if _, err := hold.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	released := false
	release := func() {
		if !released {
			released = true
			if _, err := hold.ExecContext(ctx, `ROLLBACK`); err != nil {
				t.Error(err)
			}
		}
	}
	defer release()
	passed := make(chan error, 1)
	go func() { _, err := leader.SchedulePass(); passed <- err }()
	waitLocks(t, raw, `relation = 'revisions'::regclass`, 1, "the leader's pass to read the pods and wait for the revisions table", nil)

	// The eviction through the other replica: it waits for the pass
	// (an advisory lock not granted), or, unfixed, is done at once.
	evicted := make(chan *httptest.ResponseRecorder, 1)
	go func() {
		rec := httptest.NewRecorder()
		otherAPI.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/pods/default/"+name+"/eviction",
			strings.NewReader(`{"metadata": {"name": "`+name+`", "namespace": "default"}}`)))
		evicted <- rec
	}()
	done := make(chan struct{})
	var first *httptest.ResponseRecorder
	go func() {
		select {
		case first = <-evicted:
		case <-time.After(15 * time.Second):
		}
		close(done)
	}()
	waitLocks(t, raw, `locktype = 'advisory'`, 1, "the eviction to wait for the pass or be done", done)
	release()

	select {
	case err := <-passed:
		if err != nil {
			t.Fatalf("the leader's pass: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the leader's pass did not end within 10 s of the table's release")
	}
	<-done
	if first == nil {
		t.Fatal("the eviction did not answer within 15 s")
	}
	if first.Code != http.StatusOK && first.Code != http.StatusCreated {
		t.Fatalf("the eviction: %d %s", first.Code, first.Body)
	}
	pods, err = leader.Workloads().HubPods()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods {
		if p.Name == name && p.DeletionTimestamp == nil {
			t.Fatalf("pod %s, evicted (%d), is stored bound to %q and not terminating: the leader's pass stored its older view over the eviction",
				name, first.Code, p.Spec.NodeName)
		}
	}
}
