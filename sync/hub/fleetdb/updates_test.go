package fleetdb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/podvisor/podvisor/sqldb"
	"github.com/podvisor/podvisor/sync/protocol"

	"github.com/podvisor/podvisor/test/pgtest"
)

// A database of the schema before updates gains their tables, its
// devices kept.
func TestUpdateMigrationKeepsTheFleet(t *testing.T) {
	path := filepath.Join(t.TempDir(), "fleet.db")
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrate(db, sqldb.SQLite, fleetMigrations[:len(fleetMigrations)-1]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO devices (id) VALUES ('old')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ds, err := f.Devices(time.Now(), time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "old" || ds[0].Update != nil {
		t.Fatalf("devices after the migration: %+v, %v", ds, err)
	}
	if rs, err := f.Releases(); err != nil || len(rs) != 0 {
		t.Fatalf("releases: %v, %v", rs, err)
	}
}

func TestReleasesStoredAndDeletedUnlessInUse(t *testing.T) {
	pgtest.EachStore(t, testReleasesStoredAndDeletedUnlessInUse)
}

func testReleasesStoredAndDeletedUnlessInUse(t *testing.T) {
	f := testFleet(t, "d1")
	t0 := time.UnixMilli(1700000000000)
	r := StoredRelease{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.2.0", Manifest: []byte(`{"doc":{}}`), KeyID: "k1", Created: t0}
	if err := f.AddRelease(r); err != nil {
		t.Fatal(err)
	}
	got, err := f.Release("podvisor", "v1.2.0")
	if err != nil || got.KeyID != "k1" || !got.Created.Equal(t0) || string(got.Manifest) != `{"doc":{}}` {
		t.Fatalf("release: %+v, %v", got, err)
	}
	if _, err := f.Release("podvisor", "v9"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing release: %v", err)
	}
	spec, _ := json.Marshal(map[string]any{"targets": []string{"d1"}})
	if err := f.AddUpdate(StoredUpdate{Name: "u1", Spec: spec, Created: t0}, "podvisor", "v1.2.0", []string{"d1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.DeleteRelease("podvisor", "v1.2.0"); err == nil || !strings.Contains(err.Error(), "used by update u1") {
		t.Fatalf("deleting a release in use: %v", err)
	}
	// A second update over the same device is refused while u1 runs.
	if err := f.AddUpdate(StoredUpdate{Name: "u2", Spec: spec, Created: t0}, "podvisor", "v1.2.0", []string{"d1"}); err == nil || !strings.Contains(err.Error(), "in update u1") {
		t.Fatalf("overlapping update: %v", err)
	}
	if err := f.AddUpdate(StoredUpdate{Name: "u1", Spec: spec, Created: t0}, "podvisor", "v1.2.0", nil); !errors.Is(err, ErrUpdateExists) {
		t.Fatalf("a taken name: %v", err)
	}
	if err := f.SetUpdateStatus("u1", json.RawMessage(`{"phase":"Complete"}`), false); err != nil {
		t.Fatal(err)
	}
	if us, _ := f.Updates(true); len(us) != 0 {
		t.Fatalf("active updates after completion: %+v", us)
	}
	left, err := f.DeleteRelease("podvisor", "v1.2.0")
	if err != nil || len(left) != 0 {
		t.Fatalf("delete: %v, %v", left, err)
	}
	if _, err := f.DeleteRelease("podvisor", "v1.2.0"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("deleting again: %v", err)
	}
}

func TestOrderIDsGrowAndStatesAreKept(t *testing.T) {
	pgtest.EachStore(t, testOrderIDsGrowAndStatesAreKept)
}

func testOrderIDsGrowAndStatesAreKept(t *testing.T) {
	f := testFleet(t, "d1", "d2")
	t0 := time.UnixMilli(1700000000000)
	id, err := f.NextOrderID("d1")
	if err != nil || id != 1 {
		t.Fatalf("first order id %d, %v", id, err)
	}
	if err := f.SaveOrder(Order{Device: "d1", ID: 1, Update: "u1", Document: []byte("doc1"), At: t0}); err != nil {
		t.Fatal(err)
	}
	if err := f.SaveOrder(Order{Device: "d1", ID: 1, Update: "u1", Document: []byte("again"), At: t0}); err == nil {
		t.Fatal("an order ID stored twice")
	}
	// The device reports an order the hub no longer knows (a database
	// restored from an older copy): the next ID is above it.
	s := &protocol.UpdateState{Device: "d1", Order: 7, Kind: protocol.ReleaseAgent, Version: "v1.2.0", Phase: protocol.UpdateDownloading, Percent: 40}
	if changed, err := f.SaveUpdateState(s, t0); err != nil || !changed {
		t.Fatalf("state: %v, %v", changed, err)
	}
	if changed, _ := f.SaveUpdateState(s, t0); changed {
		t.Fatal("the same report again counted as a change")
	}
	if id, _ := f.NextOrderID("d1"); id != 8 {
		t.Fatalf("next order id %d, want 8", id)
	}
	old := *s
	old.Order, old.Phase = 6, protocol.UpdateCommitted
	if changed, _ := f.SaveUpdateState(&old, t0); changed {
		t.Fatal("a report on an older order replaced the newer")
	}
	done := *s
	done.Phase, done.Reason = protocol.UpdateRolledBack, "not ready in 5m"
	if _, err := f.SaveUpdateState(&done, t0); err != nil {
		t.Fatal(err)
	}
	d, err := f.GetDevice("d1", t0, time.Minute)
	if err != nil || d.Update == nil || d.Update.Phase != protocol.UpdateRolledBack || d.Update.Reason != "not ready in 5m" {
		t.Fatalf("device's update: %+v, %v", d.Update, err)
	}
	evs, _ := f.Events("d1")
	if len(evs) != 1 || evs[0].Reason != "UpdateRolledBack" || !strings.Contains(evs[0].Message, "not ready in 5m") {
		t.Fatalf("events: %+v", evs)
	}
	if _, err := f.SaveUpdateState(&protocol.UpdateState{Device: "ghost", Order: 1, Kind: protocol.ReleaseAgent, Phase: protocol.UpdateFailed}, t0); !errors.Is(err, ErrUnknownDevice) {
		t.Fatalf("a report of an unknown device: %v", err)
	}
	targets, err := f.UpdateTargets([]string{"d1", "missing"})
	if err != nil || len(targets) != 1 || targets["d1"].Order != 1 || targets["d1"].OrderUpdate != "u1" || targets["d1"].State.Order != 7 {
		t.Fatalf("targets: %+v, %v", targets, err)
	}
	// A device's claim of a huge order cannot make its next one overflow,
	// nor hide the reports on the orders the hub makes next (it would
	// shadow every later one as "older"): the hub never makes such an
	// order, so the report is refused. An unsigned order forged on the
	// broker makes a device report exactly this (its Failed refusal).
	for _, order := range []int64{1<<63 - 1, maxReportedOrder, 0, -1} {
		huge := protocol.UpdateState{Device: "d2", Order: order, Kind: protocol.ReleaseAgent, Phase: protocol.UpdateFailed}
		if _, err := f.SaveUpdateState(&huge, t0); !errors.Is(err, ErrNotOrdered) {
			t.Fatalf("a report of order %d: %v, want %v", order, err, ErrNotOrdered)
		}
	}
	if id, _ := f.NextOrderID("d2"); id != 1 {
		t.Fatalf("next order id after a report of order 2^63-1: %d, want 1", id)
	}
	first := protocol.UpdateState{Device: "d2", Order: 1, Kind: protocol.ReleaseAgent, Version: "v1.2.0", Phase: protocol.UpdateCommitted, Percent: 100}
	if changed, err := f.SaveUpdateState(&first, t0); err != nil || !changed {
		t.Fatalf("the report on order 1 after a claim of order 2^63-1: %v, %v", changed, err)
	}
	if st, _ := f.UpdateState("d2"); st == nil || st.Order != 1 || st.Phase != protocol.UpdateCommitted {
		t.Fatalf("d2's update state: %+v", st)
	}
	os, err := f.AllOrders()
	if err != nil || len(os) != 1 || string(os[0].Document) != "doc1" {
		t.Fatalf("orders: %+v, %v", os, err)
	}
	// A claim just under the bound is believed: the hub's next order is
	// at the bound, and the device's reports on it are taken.
	below := protocol.UpdateState{Device: "d2", Order: maxReportedOrder - 1, Kind: protocol.ReleaseAgent, Phase: protocol.UpdateFailed}
	if _, err := f.SaveUpdateState(&below, t0); err != nil {
		t.Fatal(err)
	}
	next, _ := f.NextOrderID("d2")
	if next != maxReportedOrder {
		t.Fatalf("next order id after a report of order 2^53-1: %d", next)
	}
	if err := f.SaveOrder(Order{Device: "d2", ID: next, Update: "u1", Document: []byte("doc"), At: t0}); err != nil {
		t.Fatal(err)
	}
	atBound := protocol.UpdateState{Device: "d2", Order: next, Kind: protocol.ReleaseAgent, Phase: protocol.UpdateDownloading}
	if changed, err := f.SaveUpdateState(&atBound, t0); err != nil || !changed {
		t.Fatalf("the report on order 2^53, which the hub made: %v, %v", changed, err)
	}
	atBound.Order++
	if _, err := f.SaveUpdateState(&atBound, t0); !errors.Is(err, ErrNotOrdered) {
		t.Fatalf("a report on order 2^53+1, not made: %v", err)
	}
}
