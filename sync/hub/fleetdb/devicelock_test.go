package fleetdb

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/podvisor/podvisor/sqldb/postgres"
	"github.com/podvisor/podvisor/sync/protocol"
	"github.com/podvisor/podvisor/test/pgtest"
)

// The device report transactions on PostgreSQL hold the writer lock
// shared and their device's lock (beginDevice). These tests check what
// that split must keep: many devices' reports stored at once over two
// replicas' handles leave exactly the rows a serial run does; one
// device's reports never run at once; a fleet-wide transaction never
// runs beside a device's.

// openPG opens a Fleet on the PostgreSQL database url names: one
// replica's handle (a pool of its own).
func openPG(t *testing.T, url string) *Fleet {
	t.Helper()
	f, err := OpenStore(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// reportOp is one report of a device: it stores it and says what the
// store answered.
type reportOp func(f *Fleet, at time.Time) string

// deviceReports are n reports of one device, in the order it sends them:
// status batches (randomBatches: replays, new epochs, removals, events),
// heartbeats from one or, now and then, another instance (a duplicate
// ID: an event), acks, presence, rejections, update reports.
func deviceReports(rnd *rand.Rand, device string, n int) []reportOp {
	batches := randomBatches(rnd, n)
	var ops []reportOp
	for i := range n {
		switch k := rnd.Intn(10); {
		case k < 5:
			b := *batches[i]
			b.Device = device
			ops = append(ops, func(f *Fleet, at time.Time) string {
				r, err := f.StoreStatus(&b, at)
				return fmt.Sprintf("status %+v %v", r, err)
			})
		case k < 7:
			instance := "i1"
			if rnd.Intn(4) == 0 {
				instance = "i2"
			}
			ready := v1.ConditionTrue
			if rnd.Intn(3) == 0 {
				ready = v1.ConditionFalse
			}
			version := fmt.Sprintf("v%d", rnd.Intn(3))
			ops = append(ops, func(f *Fleet, at time.Time) string {
				h := &protocol.Heartbeat{Device: device, Version: version, Instance: instance,
					Labels: map[string]string{protocol.DeviceLabelPrefix + "zone": version, "other": "x"},
					Node:   v1.NodeStatus{Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: ready}}}}
				dropped, dup, err := f.SaveHeartbeat(h, at)
				return fmt.Sprintf("heartbeat %v %v %v", dropped, dup, err)
			})
		case k == 7:
			gen := int64(1 + rnd.Intn(3))
			observed := gen - int64(rnd.Intn(2))
			ops = append(ops, func(f *Fleet, at time.Time) string {
				regressed, err := f.SaveAck(&protocol.Ack{Device: device, Generation: gen, ObservedGeneration: observed}, at)
				return fmt.Sprintf("ack %v %v", regressed, err)
			})
		case k == 8:
			online := rnd.Intn(2) == 0
			ops = append(ops, func(f *Fleet, at time.Time) string {
				dup, err := f.SavePresence(device, &protocol.Presence{Device: device, Online: online, Instance: "i1"}, at)
				return fmt.Sprintf("presence %v %v", dup, err)
			})
		default:
			order := int64(1 + rnd.Intn(3))
			phase := []string{protocol.UpdateDownloading, protocol.UpdateCommitted, protocol.UpdateFailed}[rnd.Intn(3)]
			reject := rnd.Intn(2) == 0
			ops = append(ops, func(f *Fleet, at time.Time) string {
				if reject {
					return fmt.Sprintf("rejection %v", f.SaveRejection(device, "refused: "+phase, at))
				}
				changed, err := f.SaveUpdateState(&protocol.UpdateState{Device: device, Order: order, Kind: "agent",
					Version: "v2", Phase: phase, Reason: "r"}, at)
				return fmt.Sprintf("update %v %v", changed, err)
			})
		}
	}
	return ops
}

// reportsFleet readies a fleet for deviceReports: the devices, each
// with three generations published (what acks answer), small bounds so
// that pruning and the bound on made-up pods take part.
func reportsFleet(t *testing.T, f *Fleet, devices []string) {
	t.Helper()
	for _, d := range devices {
		if err := f.AddDevice(d); err != nil {
			t.Fatal(err)
		}
		for g := int64(1); g <= 3; g++ {
			if err := f.SaveDesired(DesiredDoc{Device: d, Generation: g, Pods: []json.RawMessage{}, Document: []byte(fmt.Sprint(g))}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// dumpStore is every row the device reports write, each device's in
// its order; events without their rowid (which interleaves across
// devices stored at once), each device's in rowid order.
func dumpStore(t *testing.T, f *Fleet) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT id, online, last_seen, version, COALESCE(node, ''), device_labels, instance, prev_instance, instance_since, duplicate_until FROM devices ORDER BY id`,
		`SELECT device, key, seq, pod, ready, ready_since, phase, restarts, failure, summary_at, scheduled FROM mirrors ORDER BY device, key`,
		`SELECT device, seq, key, event, at FROM events ORDER BY device, rowid`,
		`SELECT device, epoch, seq FROM cursors ORDER BY device`,
		`SELECT device, generation, observed, error, results FROM acks ORDER BY device`,
		`SELECT device, state, at FROM update_states ORDER BY device`,
	} {
		rows, err := f.db.Query(q)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			line := q[len("SELECT ") : len("SELECT ")+20]
			for _, v := range vals {
				if b, ok := v.([]byte); ok {
					v = string(b)
				}
				line += fmt.Sprintf(" | %v", v)
			}
			out = append(out, line)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// Many devices' reports stored at once, each device's in order but on
// either of two replicas' handles (as a device's bucket moves between
// them), leave the store exactly as the same reports stored one at a
// time on one handle: every row, and every answer.
func TestDeviceReportsAtOnceAsSerial(t *testing.T) {
	const devices, reports = 12, 80
	var ids []string
	for i := range devices {
		ids = append(ids, fmt.Sprintf("dev-%02d", i))
	}
	scripts := make([][]reportOp, devices)
	for i, id := range ids {
		scripts[i] = deviceReports(rand.New(rand.NewSource(int64(29+i))), id, reports)
	}
	at := func(op int) time.Time {
		return time.Unix(1700000000, 0).Add(time.Duration(op) * 700 * time.Millisecond)
	}
	bounds := Retention{Events: 6, MaxAge: 20 * time.Second, Mirrors: 4}

	serial := openPG(t, pgtest.URL(t))
	serial.SetRetention(bounds)
	reportsFleet(t, serial, ids)
	want := make([][]string, devices)
	for i := range ids {
		for op, report := range scripts[i] {
			want[i] = append(want[i], report(serial, at(op)))
		}
	}

	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	for _, f := range []*Fleet{a, b} {
		f.SetRetention(bounds)
	}
	reportsFleet(t, a, ids)
	got := make([][]string, devices)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range ids {
		wg.Go(func() {
			<-start
			rnd := rand.New(rand.NewSource(int64(i)))
			handles := []*Fleet{a, b}
			for op, report := range scripts[i] {
				got[i] = append(got[i], report(handles[rnd.Intn(2)], at(op)))
			}
		})
	}
	close(start)
	wg.Wait()
	for i := range ids {
		for op := range want[i] {
			if got[i][op] != want[i][op] {
				t.Errorf("device %s report %d: stored at once answered %q, one at a time %q", ids[i], op, got[i][op], want[i][op])
			}
		}
	}
	w, g := dumpStore(t, serial), dumpStore(t, a)
	t.Logf("%d rows; %d of them events", len(w), countPrefix(w, "device, seq, key, ev"))
	if !reflect.DeepEqual(w, g) {
		for i := range max(len(w), len(g)) {
			var wl, gl string
			if i < len(w) {
				wl = w[i]
			}
			if i < len(g) {
				gl = g[i]
			}
			if wl != gl {
				t.Fatalf("row %d of %d/%d: stored at once\n%s\none at a time\n%s", i, len(g), len(w), gl, wl)
			}
		}
	}
}

// lockWaiters counts the transactions waiting for an advisory lock on
// the store: the writer lock (what "writer") or a device lock ("device").
func lockWaiters(t *testing.T, db *sql.DB, what string) int {
	t.Helper()
	cond := fmt.Sprintf("objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %d", postgres.WriterLock)
	if what == "device" {
		cond = fmt.Sprintf("objsubid = 2 AND classid::bigint = %d", postgres.DeviceLockClass)
	}
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND ` + cond).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitLockWaiter waits until a transaction waits for the lock what
// names (lockWaiters), while done (the waiter's end) is not closed.
func waitLockWaiter(t *testing.T, db *sql.DB, what string, done <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for lockWaiters(t, db, what) == 0 {
		select {
		case <-done:
			t.Fatalf("the transaction ended without waiting for the %s lock", what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no transaction waited for the %s lock within 30 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
	select {
	case <-done:
		t.Fatalf("the transaction ended while waiting for the %s lock", what)
	default:
	}
}

// One device's reports on two replicas never run at once: a status
// batch on one waits for the other's transaction of the device, then
// reads what it committed (the batch's items already stored: a replay,
// no event twice).
func TestOneDeviceReportsSerialized(t *testing.T) {
	url := pgtest.URL(t)
	a, b := openPG(t, url), openPG(t, url)
	if err := a.AddDevice("dev"); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 0)
	batch := &protocol.StatusBatch{Device: "dev", Epoch: "e1"}
	for seq := int64(1); seq <= 4; seq++ {
		batch.Items = append(batch.Items, protocol.StatusItem{Seq: seq, Key: "default/p",
			Event: &protocol.Event{Time: at, Type: "Normal", Reason: "R", Message: fmt.Sprint(seq)}})
	}
	// Replica a's transaction of the device, as its StoreStatus of the
	// same batch would hold it.
	held, err := a.beginDevice("dev")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	var stored StatusStored
	var storeErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		stored, storeErr = b.StoreStatus(batch, at)
	}()
	waitLockWaiter(t, a.db, "device", done)
	for _, it := range batch.Items {
		ev, _ := json.Marshal(it.Event)
		if _, err := held.Exec(`INSERT INTO events (device, seq, key, event, at) VALUES (?, ?, ?, ?, ?)`, "dev", it.Seq, it.Key, ev, at.UnixMilli()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := held.Exec(`INSERT INTO cursors (device, epoch, seq) VALUES ('dev', 'e1', 4)`); err != nil {
		t.Fatal(err)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	<-done
	if storeErr != nil || stored != (StatusStored{Cursor: 4}) {
		t.Fatalf("the batch stored after the other replica's: %+v, %v; want cursor 4, nothing applied", stored, storeErr)
	}
	events, err := a.Events("dev")
	if err != nil || len(events) != 4 {
		t.Fatalf("%d events (%v), want each of the batch's 4 once", len(events), err)
	}
}

// A fleet-wide transaction (the writer lock exclusive) runs alone: a
// device's report waits for it and reads what it committed, and waits
// for it to begin until the device reports before it commit; another
// device's report does not wait for a device's transaction.
func TestFleetWideExcludesDeviceReports(t *testing.T) {
	url := pgtest.URL(t)
	a := openPG(t, url)
	// b gives up on a lock after 10 s: a wait where none is due fails
	// rather than hangs (the global lock of before made every report wait).
	b := openPG(t, url+"&lock_timeout=10s")
	for _, d := range []string{"dev", "other"} {
		if err := a.AddDevice(d); err != nil {
			t.Fatal(err)
		}
	}
	at := time.Unix(1700000000, 0)

	// A fleet-wide transaction publishing generation 1 (SaveDesired's
	// write), held: the device's ack of it waits, then finds it
	// published (before, it would be refused: ErrNotPublished).
	fleetTx, err := a.db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	defer fleetTx.Rollback()
	if _, err := fleetTx.Exec(`INSERT INTO desired (device, generation, pods, document) VALUES ('dev', 1, '[]', '1')`); err != nil {
		t.Fatal(err)
	}
	var ackErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, ackErr = a.SaveAck(&protocol.Ack{Device: "dev", Generation: 1, ObservedGeneration: 1}, at)
	}()
	waitLockWaiter(t, a.db, "writer", done)
	if err := fleetTx.Commit(); err != nil {
		t.Fatal(err)
	}
	<-done
	if ackErr != nil {
		t.Fatalf("the ack after the fleet-wide transaction: %v", ackErr)
	}

	// A device's transaction held: another device's reports go on, a
	// fleet-wide transaction waits until it ends.
	held, err := a.beginDevice("dev")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback()
	if _, _, err := b.SaveHeartbeat(&protocol.Heartbeat{Device: "other", Version: "v1"}, at); err != nil {
		t.Fatalf("another device's heartbeat while a device's transaction runs: %v", err)
	}
	var desiredErr error
	done = make(chan struct{})
	go func() {
		defer close(done)
		desiredErr = a.SaveDesired(DesiredDoc{Device: "dev", Generation: 2, Pods: []json.RawMessage{}, Document: []byte("2")})
	}()
	waitLockWaiter(t, a.db, "writer", done)
	// What the device's transaction read stays true until it ends.
	var published int64
	if err := held.QueryRow(`SELECT MAX(generation) FROM desired WHERE device = 'dev'`).Scan(&published); err != nil || published != 1 {
		t.Fatalf("inside the device's transaction: generation %d published (%v), want 1", published, err)
	}
	if err := held.Commit(); err != nil {
		t.Fatal(err)
	}
	<-done
	if desiredErr != nil {
		t.Fatalf("the fleet-wide write after the device's transaction: %v", desiredErr)
	}
}

// The lock query takes the writer lock shared, then the device's, and
// names no text of the device's.
func TestDeviceLockKeys(t *testing.T) {
	if a, b := postgres.DeviceLockKey("dev-1"), postgres.DeviceLockKey("dev-2"); a == b {
		t.Fatalf("two devices share key %d", a)
	}
	url := pgtest.URL(t)
	f := openPG(t, url)
	tx, err := f.beginDevice("it's")
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	rows, err := tx.Query(`SELECT mode, objsubid, classid::bigint, objid::bigint FROM pg_locks
		WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted ORDER BY objsubid`)
	if err != nil {
		t.Fatal(err)
	}
	var held []string
	for rows.Next() {
		var mode string
		var sub, class, obj int64
		if err := rows.Scan(&mode, &sub, &class, &obj); err != nil {
			t.Fatal(err)
		}
		held = append(held, fmt.Sprintf("%s %d %d %d", mode, sub, class, obj))
	}
	rows.Close()
	want := []string{
		fmt.Sprintf("ShareLock 1 %d %d", uint64(postgres.WriterLock)>>32, uint64(postgres.WriterLock)&0xffffffff),
		fmt.Sprintf("ExclusiveLock 2 %d %d", postgres.DeviceLockClass, uint32(postgres.DeviceLockKey("it's"))),
	}
	if !reflect.DeepEqual(held, want) {
		t.Fatalf("a device's transaction holds %v, want %v", held, want)
	}
}

func countPrefix(lines []string, prefix string) int {
	n := 0
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			n++
		}
	}
	return n
}
