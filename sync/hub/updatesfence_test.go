package hub_test

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetdb"
	"github.com/podvisor/podvisor/sync/hub/replica"
	"github.com/podvisor/podvisor/test/pgtest"
)

// The update driver's writes (its waves' orders, its statuses and
// halts) are fenced by the leader's token, as the scheduler's placements
// are: once another replica took the leader lease, a late order or
// status of the deposed leader is refused in its own transaction and
// nothing of it is stored. PostgreSQL only: on SQLite one replica leads
// until it stops.
func TestDeposedLeadersUpdateWritesAreFenced(t *testing.T) {
	url := pgtest.URL(t)
	_, key, _ := ed25519.GenerateKey(nil)
	leader := startPGReplica(t, url, "leader", key)
	within(t, 10*time.Second, "the first replica to lead", leader.elector.Leading)

	if err := leader.fleet.AddUpdate(fleetdb.StoredUpdate{Name: "u1", Spec: json.RawMessage(`{"targets":["dev1"]}`), Created: time.Now()},
		"podvisor", "1.2.0", []string{"dev1"}); err != nil {
		t.Fatal(err)
	}
	first := fleetdb.Order{Device: "dev1", ID: 1, Update: "u1", Document: []byte(`{"id":1}`), At: time.Now()}
	if err := leader.fleet.SaveOrder(first); err != nil {
		t.Fatalf("the leader's order: %v", err)
	}
	if err := leader.fleet.SetUpdateStatus("u1", json.RawMessage(`{"phase":"Progressing"}`), true); err != nil {
		t.Fatalf("the leader's update status: %v", err)
	}

	// Another replica takes the lease by force (as it would past the
	// leader's expiry, the leader paused).
	other, err := fleetdb.OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	store := replica.NewStore(other.SQL())
	l, _, err := store.ReadLease(replica.LeaderLease)
	if err != nil || l == nil {
		t.Fatalf("reading the leader lease: %+v %v", l, err)
	}
	taker := replica.Self{ID: "taker", Nonce: "nonce-taker"}
	if ok, err := store.WriteLease(replica.LeaderLease, taker, l, replica.Decision{Action: replica.Take, Token: l.Token + 1}, time.Minute); err != nil || !ok {
		t.Fatalf("the other replica's take: %v %v", ok, err)
	}

	// The deposed leader's late pass: its next wave's order and its halt.
	late := fleetdb.Order{Device: "dev1", ID: 2, Update: "u1", Document: []byte(`{"id":2}`), At: time.Now()}
	if err := leader.fleet.SaveOrder(late); !errors.Is(err, replica.ErrDeposed) {
		t.Fatalf("the deposed leader's order: %v, want ErrDeposed", err)
	}
	if err := leader.fleet.SetUpdateStatus("u1", json.RawMessage(`{"phase":"Halted"}`), false); !errors.Is(err, replica.ErrDeposed) {
		t.Fatalf("the deposed leader's update status: %v, want ErrDeposed", err)
	}
	if o, err := other.DeviceOrder("dev1"); err != nil || o.ID != 1 {
		t.Fatalf("dev1's stored order: %+v %v, want the leader's first (ID 1)", o, err)
	}
	if u, err := other.Update("u1"); err != nil || string(u.Status) != `{"phase":"Progressing"}` || !u.Active {
		t.Fatalf("u1 as stored: status %s, active %v (%v); want the leader's first status, active", u.Status, u.Active, err)
	}
}
