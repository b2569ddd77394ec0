package fleetdb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/podvisor/podvisor/sync/hub/fleetdb/objectdb"
	"github.com/podvisor/podvisor/sync/hub/fleetdb/workloaddb"
	"github.com/podvisor/podvisor/sync/hub/kinds"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// Every table of the SQLite schema is copied or skipped with a reason,
// and every skipped one is a table of the schema: a table a migration
// adds is copied unless it is added to CopySkipped (with why). That it
// is copied whole, TestCopyStore checks: it fails on a copied table
// that fillFleet leaves empty, until the new table is filled there.
func TestCopyCoversEveryTable(t *testing.T) {
	f := openLite(t)
	all, err := strings1(context.Background(), f.db, `SELECT name FROM sqlite_master WHERE type = 'table'`)
	if err != nil {
		t.Fatal(err)
	}
	copied, err := CopiedTables(context.Background(), f.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range all {
		_, skipped := CopySkipped[table]
		if !slices.Contains(copied, table) && !skipped && !strings.HasPrefix(table, "sqlite_") {
			t.Errorf("table %s is neither copied nor skipped", table)
		}
	}
	for table, why := range CopySkipped {
		if !slices.Contains(all, table) || why == "" {
			t.Errorf("skipped table %s (%q) is not in the SQLite schema, or has no reason", table, why)
		}
	}
	if len(copied) < 15 {
		t.Errorf("copied tables %v: fewer than the fleet has", copied)
	}
}

// A fleet filled through the stores' own writes (every copied table
// holds rows) is on PostgreSQL after the copy, row for row and as the
// fleet reads it; a new event takes a rowid past the copied ones; a
// second copy into the now non-empty store is refused and changes
// nothing.
func TestCopyStore(t *testing.T) {
	src := openLite(t)
	fillFleet(t, src, 3)
	// SQLite keeps text in a BLOB column as text (a default's '{}'):
	// bytea takes its bytes, even those bytea's text form would read as
	// an escape.
	if _, err := src.db.Exec(`UPDATE devices SET device_labels = '\x7b7d' WHERE id = 'dev-00002'`); err != nil {
		t.Fatal(err)
	}
	dst := openFreshPG(t)
	ctx := context.Background()
	copied, err := CopyStore(ctx, dst, src, 7) // batches of 7 rows: several a table
	if err != nil {
		t.Fatal(err)
	}
	tables, err := CopiedTables(ctx, src.db)
	if err != nil {
		t.Fatal(err)
	}
	if got := tableNames(copied); !slices.Equal(got, tables) {
		t.Errorf("copied %v, want every table %v", got, tables)
	}
	for _, c := range copied {
		if c.Rows == 0 {
			t.Errorf("table %s: no row to copy (fillFleet fills every table)", c.Table)
		}
	}
	want := dumpCopied(t, src, dst)
	got := dumpCopied(t, dst, dst)
	for _, table := range tables {
		if !slices.Equal(got[table], want[table]) {
			t.Errorf("table %s on PostgreSQL:\n%s\nwant (SQLite):\n%s", table, strings.Join(got[table], "\n"), strings.Join(want[table], "\n"))
		}
	}

	// What the fleet reads is the same.
	now := time.UnixMilli(1700000100000)
	liteDevs, err := src.Devices(now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pgDevs, err := dst.Devices(now, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := jsonOf(t, liteDevs), jsonOf(t, pgDevs); a != b || len(pgDevs) != 3 {
		t.Errorf("devices on PostgreSQL:\n%s\nwant:\n%s", b, a)
	}
	for _, read := range []struct {
		what string
		of   func(f *Fleet) (any, error)
	}{
		{"mirror pods", func(f *Fleet) (any, error) { return f.MirrorPods("dev-00001", now, time.Minute) }},
		{"events", func(f *Fleet) (any, error) { return f.Events("dev-00001") }},
		{"desired", func(f *Fleet) (any, error) { return f.Desired("dev-00002") }},
		{"ack", func(f *Fleet) (any, error) { return f.LastAck("dev-00000") }},
		{"releases", func(f *Fleet) (any, error) { return f.Releases() }},
		{"orders", func(f *Fleet) (any, error) { return f.AllOrders() }},
		{"object indexes", func(f *Fleet) (any, error) { return f.ObjectIndexes() }},
		{"scheduling", func(f *Fleet) (any, error) { return f.DeviceScheduling() }},
		{"secret", func(f *Fleet) (any, error) { return testObjects(t, f).Secret("default", "db") }},
		{"workloads", func(f *Fleet) (any, error) { return workloaddb.New(f.SQL()).LoadWorkloads() }},
	} {
		a, err := read.of(src)
		if err != nil {
			t.Fatalf("%s on SQLite: %v", read.what, err)
		}
		b, err := read.of(dst)
		if err != nil {
			t.Fatalf("%s on PostgreSQL: %v", read.what, err)
		}
		if ja, jb := jsonOf(t, a), jsonOf(t, b); ja != jb || ja == "null" {
			t.Errorf("%s on PostgreSQL:\n%s\nwant:\n%s", read.what, jb, ja)
		}
	}

	// A new event after the copy takes a rowid past the copied ones.
	var maxRowid int64
	if err := dst.db.QueryRow(`SELECT max(rowid) FROM events`).Scan(&maxRowid); err != nil || maxRowid == 0 {
		t.Fatalf("max rowid of the copied events: %d, %v", maxRowid, err)
	}
	if err := dst.SaveRejection("dev-00000", "after the copy", now); err != nil {
		t.Fatal(err)
	}
	var newRowid int64
	if err := dst.db.QueryRow(`SELECT rowid FROM events WHERE event LIKE '%after the copy%'`).Scan(&newRowid); err != nil || newRowid <= maxRowid {
		t.Errorf("a new event's rowid %d (%v), want past the copied %d", newRowid, err, maxRowid)
	}
	var schedMax int64
	if err := dst.db.QueryRow(`SELECT max(rowid) FROM sched_events`).Scan(&schedMax); err != nil {
		t.Fatal(err)
	}
	if err := workloaddb.New(dst.SQL()).StorePods(workloaddb.PodWrites{Events: []workloaddb.SchedEvent{
		{Kind: "DaemonSet", Namespace: "default", Name: "agent", Type: "Normal", Reason: "AfterCopy", Message: "new", Count: 1, First: now, Last: now}}}, now); err != nil {
		t.Fatal(err)
	}
	var schedNew int64
	if err := dst.db.QueryRow(`SELECT rowid FROM sched_events WHERE reason = 'AfterCopy'`).Scan(&schedNew); err != nil || schedNew <= schedMax {
		t.Errorf("a new scheduler event's rowid %d (%v), want past the copied %d", schedNew, err, schedMax)
	}

	// A second copy into the now non-empty store is refused, naming a
	// table, and leaves the store as it was.
	before := dumpCopied(t, dst, dst)
	_, err = CopyStore(ctx, dst, src, 0)
	if !errors.Is(err, ErrTargetNotEmpty) || !strings.Contains(err.Error(), "table acks holds 3 rows") {
		t.Fatalf("a second copy: %v, want refused naming the first table with rows", err)
	}
	if after := dumpCopied(t, dst, dst); !maps.EqualFunc(before, after, slices.Equal) {
		t.Error("the refused copy changed the target")
	}
}

// A target holding one fleet row anywhere, even where a fresh store
// holds a counter's first row, is refused.
func TestCopyRefusesAnyFleetRow(t *testing.T) {
	src := openLite(t)
	fillFleet(t, src, 1)
	for _, c := range []struct{ table, write string }{
		{"config_object_version", `UPDATE config_object_version SET last = 5`},
		{"sched_events", `INSERT INTO sched_events (kind, namespace, name, type, reason, message, count, first, last) VALUES ('a', 'b', 'c', 'd', 'e', 'f', 1, 2, 3)`},
	} {
		dst := openFreshPG(t)
		if _, err := dst.db.Exec(c.write); err != nil {
			t.Fatal(err)
		}
		if _, err := CopyStore(context.Background(), dst, src, 0); !errors.Is(err, ErrTargetNotEmpty) || !strings.Contains(err.Error(), "table "+c.table+" ") {
			t.Errorf("a target with a row in %s: %v, want refused naming it", c.table, err)
		}
		var devices int
		if err := dst.db.QueryRow(`SELECT count(*) FROM devices`).Scan(&devices); err != nil || devices != 0 {
			t.Errorf("devices after the refused copy: %d, %v", devices, err)
		}
	}
}

// A row PostgreSQL refuses (text that is not UTF-8, which SQLite keeps)
// fails the copy naming its table, row and column, and nothing of the
// tables copied before it stays: one transaction.
func TestCopyAllOrNothing(t *testing.T) {
	src := openLite(t)
	fillFleet(t, src, 2)
	if _, err := src.db.Exec(`INSERT INTO updates (name, release, version, spec, created) VALUES ('u-bad', 'podvisor', CAST(x'ff00' AS TEXT), '{}', 1)`); err != nil {
		t.Fatal(err)
	}
	dst := openFreshPG(t)
	_, err := CopyStore(context.Background(), dst, src, 0)
	if err == nil || !strings.Contains(err.Error(), "copying table updates") {
		t.Fatalf("a copy with a row PostgreSQL refuses: %v, want it to fail naming the table", err)
	}
	for _, table := range []string{"devices", "acks", "events", "config_object_version"} {
		var n int
		if err := dst.db.QueryRow(`SELECT count(*) FROM ` + table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"config_object_version": 1}[table]; n != want {
			t.Errorf("table %s after the failed copy: %d rows, want %d (as a fresh store)", table, n, want)
		}
	}
}

// A column SQLite has and PostgreSQL lacks (a fleet.db a newer release
// added to) is refused before anything is written: its values would be
// lost.
func TestCopyRefusesAColumnPostgresLacks(t *testing.T) {
	src := openLite(t)
	fillFleet(t, src, 1)
	if _, err := src.db.Exec(`ALTER TABLE devices ADD COLUMN newer TEXT`); err != nil {
		t.Fatal(err)
	}
	dst := openFreshPG(t)
	if _, err := CopyStore(context.Background(), dst, src, 0); err == nil || !strings.Contains(err.Error(), "column newer of table devices") {
		t.Fatalf("a column PostgreSQL lacks: %v", err)
	}
}

func openLite(t testing.TB) *Fleet {
	t.Helper()
	f, err := Open(filepath.Join(t.TempDir(), "fleet.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func openFreshPG(t testing.TB) *Fleet {
	t.Helper()
	f, err := OpenStore(pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// dumpCopied is every copied table of f as TableRows has it, with the
// columns of PostgreSQL's store pg (rowid too).
func dumpCopied(t *testing.T, f, pg *Fleet) map[string][]string {
	t.Helper()
	ctx := context.Background()
	out := map[string][]string{}
	tables, err := strings1(ctx, pg.db, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range tables {
		if _, skipped := CopySkipped[table]; skipped {
			continue
		}
		cols, err := strings1(ctx, pg.db, `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = ? ORDER BY column_name`, table)
		if err != nil {
			t.Fatal(err)
		}
		if out[table], err = TableRows(ctx, f.db, table, cols); err != nil {
			t.Fatalf("table %s: %v", table, err)
		}
	}
	return out
}

func tableNames(copied []TableCopy) []string {
	var out []string
	for _, c := range copied {
		out = append(out, c.Table)
	}
	return out
}

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// testSecretsKey seals the test fleets' Secrets.
var testSecretsKey = []byte("0123456789abcdef0123456789abcdef")

func testObjects(t testing.TB, f *Fleet) *objectdb.Store {
	t.Helper()
	key, err := objectdb.NewKey(testSecretsKey, "test")
	if err != nil {
		t.Fatal(err)
	}
	s := objectdb.New(f.SQL())
	s.SetKeys(objectdb.NewKeyring(key))
	return s
}

// fillFleet fills every table a copy carries through the stores' own
// writes: devices enrolled, labelled, cordoned, tainted, fenced, with
// heartbeats, desired documents, statuses with events, acks and object
// indexes; a DaemonSet with its pods, events and revisions; a ConfigMap
// and a Secret; a release, an update, its order and a device's report.
func fillFleet(t testing.TB, f *Fleet, devices int) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	at := time.UnixMilli(1700000000000)
	for i := range devices {
		id := fmt.Sprintf("dev-%05d", i)
		must(f.AddDevice(id))
		must(f.EnrolSealKey(id, []byte(fmt.Sprintf("%032d", i)), at))
		must(f.SetLabels(id, map[string]string{"site": fmt.Sprintf("plant-%d", i%3)}))
		_, _, err := f.SaveHeartbeat(&protocol.Heartbeat{Device: id, Time: at, Version: "v1.0.0", Instance: "i-" + id,
			Labels: map[string]string{protocol.DeviceLabelPrefix + "arch": "arm64"},
			Node:   v1.NodeStatus{Capacity: v1.ResourceList{}, NodeInfo: v1.NodeSystemInfo{Architecture: "arm64"}}}, at)
		must(err)
		pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default", UID: types.UID("uid-" + id)},
			Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app", Image: "registry.example/app:1"}}}}
		raw, _ := json.Marshal(pod)
		must(f.SaveDesired(DesiredDoc{Device: id, Generation: 1, Pods: []json.RawMessage{raw}, Document: []byte("signed document of " + id)}))
		running := pod.DeepCopy()
		running.Status = v1.PodStatus{Phase: v1.PodRunning, Conditions: []v1.PodCondition{{Type: v1.PodReady, Status: v1.ConditionTrue}},
			ContainerStatuses: []v1.ContainerStatus{{Name: "app", Ready: true, State: v1.ContainerState{Running: &v1.ContainerStateRunning{}}}}}
		batch := &protocol.StatusBatch{Device: id, Epoch: "e1", Items: []protocol.StatusItem{
			{Seq: 1, Key: "default/app", Pod: running},
			{Seq: 2, Key: "default/app", Event: &protocol.Event{Time: at, Type: "Normal", Reason: "Started", Message: "Started container app"}},
			{Seq: 3, Key: "default/app", Event: &protocol.Event{Time: at.Add(time.Second), Type: "Warning", Reason: "BackOff", Message: "back-off \x00 'quoted' \\x"}},
		}}
		_, _, gap, err := f.ApplyStatus(batch, at)
		must(err)
		if gap {
			t.Fatal("a gap in the first batch")
		}
		_, err = f.SaveAck(&protocol.Ack{Device: id, Generation: 1, ObservedGeneration: 1}, at)
		must(err)
		must(f.SaveObjectIndex(id, 1, []protocol.ObjectEntry{{Kind: "Secret", Namespace: "default", Name: "db", UID: "u1", ResourceVersion: "2"}}, []byte("index of "+id), nil))
	}
	first := "dev-00000"
	must(f.SetCordon(first, true))
	must(f.SetTaint(first, v1.Taint{Key: "dedicated", Value: "cam", Effect: v1.TaintEffectNoSchedule}, false, at))
	must(f.SetFenced(first, at))
	must(f.SaveRejection(first, "bad batch", at))

	must(f.AddRelease(StoredRelease{Kind: protocol.ReleaseAgent, Name: "podvisor", Version: "v1.2.0", Manifest: []byte(`{"doc":{}}`), KeyID: "k1", Created: at}))
	spec, _ := json.Marshal(map[string]any{"targets": []string{first}})
	must(f.AddUpdate(StoredUpdate{Name: "u1", Spec: spec, Created: at}, "podvisor", "v1.2.0", []string{first}))
	must(f.SaveOrder(Order{Device: first, ID: 1, Update: "u1", Document: []byte("order"), At: at}))
	_, err := f.SaveUpdateState(&protocol.UpdateState{Device: first, Time: at, Order: 1, Kind: protocol.ReleaseAgent, Version: "v1.2.0", Phase: protocol.UpdateDownloading, Percent: 40}, at)
	must(err)

	objs, err := kinds.Decode("fleet.yaml", []byte(`apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: default}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec: {containers: [{name: agent, image: registry.example/agent:1}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: app}
data: {mode: fast}
---
apiVersion: v1
kind: Secret
metadata: {name: db}
stringData: {password: s3cret}
`))
	must(err)
	w := workloaddb.New(f.SQL())
	must(w.ApplyObjects(objs, at))
	must(testObjects(t, f).Apply(objs, at, nil))
	var puts []workloaddb.PodWrite
	for i := range devices {
		puts = append(puts, workloaddb.PodWrite{Key: types.NamespacedName{Namespace: "default", Name: fmt.Sprintf("agent-%d", i)},
			Device: fmt.Sprintf("dev-%05d", i), Raw: json.RawMessage(`{"metadata":{"name":"agent"}}`)})
	}
	must(w.StorePods(workloaddb.PodWrites{Put: puts,
		Events:   []workloaddb.SchedEvent{{Kind: "DaemonSet", Namespace: "default", Name: "agent", Type: "Normal", Reason: "SuccessfulCreate", Message: "created", Count: 1, First: at, Last: at}},
		Statuses: []workloaddb.StatusWrite{{Kind: "DaemonSet", Namespace: "default", Name: "agent", Raw: json.RawMessage(`{"desiredNumberScheduled":1}`)}},
		Revisions: []workloaddb.RevisionSet{{Kind: "DaemonSet", Namespace: "default", Name: "agent",
			Revisions: []workloaddb.Revision{{Number: 1, Hash: "abc", Template: json.RawMessage(`{"spec":{}}`)}}}}}, at))
}
