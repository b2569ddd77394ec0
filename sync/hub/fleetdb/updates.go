package fleetdb

import (
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/podvisor/podvisor/sync/hub/fleetwatch"
	"github.com/podvisor/podvisor/sync/protocol"
)

// updateTables are migration 9 of fleet.db: releases (the signed
// manifest as pushed; the artifacts' bytes are files in the data
// directory, named by their hash), updates (each one's spec and the
// status its controller last computed), each device's newest update
// order (signed, as published retained) and its newest update report.
const updateTables = `CREATE TABLE releases (
		kind     TEXT NOT NULL,
		name     TEXT NOT NULL,
		version  TEXT NOT NULL,
		manifest BLOB NOT NULL,
		key_id   TEXT NOT NULL,
		created  INTEGER NOT NULL,
		PRIMARY KEY (name, version)
	);
	CREATE TABLE updates (
		name     TEXT PRIMARY KEY,
		release  TEXT NOT NULL,
		version  TEXT NOT NULL,
		spec     BLOB NOT NULL,
		status   BLOB NOT NULL DEFAULT '{}',
		active   INTEGER NOT NULL DEFAULT 1,
		created  INTEGER NOT NULL
	);
	CREATE TABLE update_orders (
		device      TEXT PRIMARY KEY,
		id          INTEGER NOT NULL,
		update_name TEXT NOT NULL,
		document    BLOB NOT NULL,
		at          INTEGER NOT NULL
	);
	CREATE TABLE update_states (
		device TEXT PRIMARY KEY,
		state  BLOB NOT NULL,
		at     INTEGER NOT NULL
	);`

// StoredRelease is a release as pushed: its signed manifest and what the
// hub shows of it.
type StoredRelease struct {
	Kind     string    `json:"kind"`
	Name     string    `json:"name"`
	Version  string    `json:"version"`
	Manifest []byte    `json:"manifest"` // signed, as devices get it
	KeyID    string    `json:"keyId"`
	Created  time.Time `json:"created"`
}

// ErrReleaseExists is a push of a name and version already stored.
var ErrReleaseExists = errors.New("release exists")

// AddRelease stores a pushed release; its artifacts are already on disk.
func (f *Fleet) AddRelease(r StoredRelease) error {
	_, err := f.db.Exec(`INSERT INTO releases (kind, name, version, manifest, key_id, created) VALUES (?, ?, ?, ?, ?, ?)
		ON CONFLICT DO NOTHING`, r.Kind, r.Name, r.Version, r.Manifest, r.KeyID, r.Created.UnixMilli())
	if err != nil {
		return err
	}
	return nil
}

// Releases lists the stored releases by name, then creation.
func (f *Fleet) Releases() ([]StoredRelease, error) {
	return f.releases(`SELECT kind, name, version, manifest, key_id, created FROM releases ORDER BY name, created`)
}

// Release is one stored release.
func (f *Fleet) Release(name, version string) (StoredRelease, error) {
	rs, err := f.releases(`SELECT kind, name, version, manifest, key_id, created FROM releases WHERE name = ? AND version = ?`, name, version)
	if err != nil {
		return StoredRelease{}, err
	}
	if len(rs) == 0 {
		return StoredRelease{}, fmt.Errorf("release %s %s: %w", name, version, ErrNotFound)
	}
	return rs[0], nil
}

func (f *Fleet) releases(query string, args ...any) ([]StoredRelease, error) {
	rows, err := f.db.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StoredRelease
	for rows.Next() {
		var r StoredRelease
		var created int64
		if err := rows.Scan(&r.Kind, &r.Name, &r.Version, &r.Manifest, &r.KeyID, &created); err != nil {
			return nil, err
		}
		r.Created = time.UnixMilli(created)
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteRelease removes a release no active update uses; it returns the
// manifests of the releases left, so the caller keeps the artifacts they
// still name.
func (f *Fleet) DeleteRelease(name, version string) (left [][]byte, err error) {
	tx, err := f.db.Begin()
	if err != nil {
		return nil, err
	}
	defer tx.Rollback()
	var user string
	err = tx.QueryRow(`SELECT name FROM updates WHERE release = ? AND version = ? AND active = 1 LIMIT 1`, name, version).Scan(&user)
	if err == nil {
		return nil, fmt.Errorf("release %s %s is used by update %s (podhub update abort %s first)", name, version, user, user)
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return nil, err
	}
	res, err := tx.Exec(`DELETE FROM releases WHERE name = ? AND version = ?`, name, version)
	if err != nil {
		return nil, err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return nil, fmt.Errorf("release %s %s: %w", name, version, ErrNotFound)
	}
	rows, err := tx.Query(`SELECT manifest FROM releases`)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var m []byte
		if err := rows.Scan(&m); err != nil {
			rows.Close()
			return nil, err
		}
		left = append(left, m)
	}
	rows.Close()
	return left, tx.Commit()
}

// StoredUpdate is an update's spec and status as its controller keeps
// them (JSON of sync/hub/updates' Spec and Status).
type StoredUpdate struct {
	Name    string
	Spec    json.RawMessage
	Status  json.RawMessage
	Active  bool
	Created time.Time
}

// ErrUpdateExists is an update name already taken.
var ErrUpdateExists = errors.New("update exists")

// AddUpdate stores a new update over targets, refused when one of them is
// in another active update (a device has one order at a time).
func (f *Fleet) AddUpdate(u StoredUpdate, release, version string, targets []string) error {
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	rows, err := tx.Query(`SELECT name, spec FROM updates WHERE active = 1`)
	if err != nil {
		return err
	}
	want := map[string]bool{}
	for _, t := range targets {
		want[t] = true
	}
	for rows.Next() {
		var name string
		var raw []byte
		if err := rows.Scan(&name, &raw); err != nil {
			rows.Close()
			return err
		}
		var spec struct{ Targets []string }
		json.Unmarshal(raw, &spec)
		for _, t := range spec.Targets {
			if want[t] {
				rows.Close()
				return fmt.Errorf("device %s is in update %s, which is not finished (podhub update abort %s ends it)", t, name, name)
			}
		}
	}
	rows.Close()
	res, err := tx.Exec(`INSERT INTO updates (name, release, version, spec, status, active, created) VALUES (?, ?, ?, ?, ?, 1, ?)
		ON CONFLICT DO NOTHING`, u.Name, release, version, []byte(u.Spec), statusOrEmpty(u.Status), u.Created.UnixMilli())
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("update %s: %w", u.Name, ErrUpdateExists)
	}
	return tx.Commit()
}

func statusOrEmpty(s json.RawMessage) []byte {
	if len(s) == 0 {
		return []byte("{}")
	}
	return s
}

// Updates lists the updates, newest first; only the active ones with
// active.
func (f *Fleet) Updates(active bool) ([]StoredUpdate, error) {
	return f.updates(`SELECT name, spec, status, active, created FROM updates WHERE active = 1 OR ? = 0 ORDER BY created DESC, name`, active)
}

// Update is one update.
func (f *Fleet) Update(name string) (StoredUpdate, error) {
	us, err := f.updates(`SELECT name, spec, status, active, created FROM updates WHERE name = ?`, name)
	if err != nil {
		return StoredUpdate{}, err
	}
	if len(us) == 0 {
		return StoredUpdate{}, fmt.Errorf("update %s: %w", name, ErrNotFound)
	}
	return us[0], nil
}

func (f *Fleet) updates(query string, args ...any) ([]StoredUpdate, error) {
	rows, err := f.db.Query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []StoredUpdate
	for rows.Next() {
		var u StoredUpdate
		var spec, status []byte
		var created int64
		if err := rows.Scan(&u.Name, &spec, &status, &u.Active, &created); err != nil {
			return nil, err
		}
		u.Spec, u.Status, u.Created = spec, status, time.UnixMilli(created)
		out = append(out, u)
	}
	return out, rows.Err()
}

// SetUpdateSpec replaces an update's spec (pause, resume, abort).
func (f *Fleet) SetUpdateSpec(name string, spec json.RawMessage) error {
	res, err := f.db.Exec(`UPDATE updates SET spec = ? WHERE name = ?`, []byte(spec), name)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("update %s: %w", name, ErrNotFound)
	}
	return nil
}

// SetUpdateStatus stores an update's status; a finished update (active
// false) is no longer driven.
// Fenced (SetLeaderFence): the update driver's pass writes it.
func (f *Fleet) SetUpdateStatus(name string, status json.RawMessage, active bool) error {
	return f.leaderWrite(func(tx *sql.Tx) error {
		_, err := tx.Exec(`UPDATE updates SET status = ?, active = ? WHERE name = ?`, []byte(status), active, name)
		return err
	})
}

// SetLeaderFence has the update driver's writes (SaveOrder,
// SetUpdateStatus: its waves' orders and withdrawals, its statuses and
// halts) check fence first in their transaction, and store nothing if it
// fails: with several replicas, a deposed leader's late pass is refused
// (replica.Elector.Fence), as the scheduler's placements are
// (workloaddb.Store.SetFence). Set before the driver starts.
func (f *Fleet) SetLeaderFence(fence func(tx *sql.Tx) error) { f.leaderFence = fence }

// leaderWrite runs write, the leader's, in a transaction fenced by the
// leader fence (alone when none is set: a hub alone, SQLite).
func (f *Fleet) leaderWrite(write func(tx *sql.Tx) error) error {
	tx, err := f.db.Begin()
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if f.leaderFence != nil {
		if err := f.leaderFence(tx); err != nil {
			return err
		}
	}
	if err := write(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// Order is a device's newest update order, as published.
type Order struct {
	Device string
	ID     int64
	// Update names the update that made it; "" for a withdrawal.
	Update   string
	Document []byte
	At       time.Time
}

// NextOrderID is the ID a device's next order takes: above both the
// stored order's and the newest the device reported, so a hub whose
// database was restored from an older copy never sends an ID the device
// already acted on.
func (f *Fleet) NextOrderID(device string) (int64, error) {
	var stored, reported int64
	if err := f.db.QueryRow(`SELECT COALESCE((SELECT id FROM update_orders WHERE device = ?), 0),
		COALESCE((SELECT `+f.dialect.Pick(`json_extract(state, '$.order')`, `(json_of(state)->>'order')::bigint`)+` FROM update_states WHERE device = ?), 0)`,
		device, device).Scan(&stored, &reported); err != nil {
		return 0, err
	}
	if reported >= maxReportedOrder {
		reported = 0 // a device's own claim cannot make its IDs overflow
	}
	return max(stored, reported) + 1, nil
}

// ErrNotOrdered is an update report on an order ID the hub never makes:
// under 1, or at maxReportedOrder and above unless it made it (a device
// that reported maxReportedOrder-1 gets its next order above).
var ErrNotOrdered = errors.New("the hub never makes an update order with this ID")

// maxReportedOrder bounds the order ID a device's report may move the
// next one to (2^53: exact in any JSON reader).
const maxReportedOrder = 1 << 53

// SaveOrder stores a device's newest order, replacing the one before; it
// fails when the ID does not grow. Fenced (SetLeaderFence): the update
// driver's pass orders.
func (f *Fleet) SaveOrder(o Order) error {
	return f.leaderWrite(func(tx *sql.Tx) error {
		res, err := tx.Exec(`INSERT INTO update_orders (device, id, update_name, document, at) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT(device) DO UPDATE SET id = excluded.id, update_name = excluded.update_name, document = excluded.document, at = excluded.at
			WHERE excluded.id > update_orders.id`, o.Device, o.ID, o.Update, o.Document, o.At.UnixMilli())
		if err != nil {
			return err
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("device %s: an order newer than %d is stored", o.Device, o.ID)
		}
		return nil
	})
}

// DeviceOrder is a device's newest order (ID 0: none).
func (f *Fleet) DeviceOrder(device string) (Order, error) {
	o := Order{Device: device}
	var at int64
	err := f.db.QueryRow(`SELECT id, update_name, document, at FROM update_orders WHERE device = ?`, device).Scan(&o.ID, &o.Update, &o.Document, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return o, nil
	}
	o.At = time.UnixMilli(at)
	return o, err
}

// AllOrders lists every device's newest order, to publish again.
func (f *Fleet) AllOrders() ([]Order, error) {
	rows, err := f.db.Query(`SELECT device, id, update_name, document, at FROM update_orders ORDER BY device`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Order
	for rows.Next() {
		var o Order
		var at int64
		if err := rows.Scan(&o.Device, &o.ID, &o.Update, &o.Document, &at); err != nil {
			return nil, err
		}
		o.At = time.UnixMilli(at)
		out = append(out, o)
	}
	return out, rows.Err()
}

// SaveUpdateState stores a known device's update report. A report about
// an older order than the one stored is ignored (a retained message
// replayed); changed says whether it differs from the stored one. A
// report that ends an order is also kept as the device's event.
func (f *Fleet) SaveUpdateState(s *protocol.UpdateState, at time.Time) (changed bool, err error) {
	defer f.changes.Deliver(s.Device, fleetwatch.Node)
	// NextOrderID ignores a claim this high: stored, it would make every
	// report on the orders made next look older, and be dropped.
	if s.Order < 1 {
		return false, fmt.Errorf("update state of order %d: %w", s.Order, ErrNotOrdered)
	}
	// The device's own rows; its order (update_orders) only the leader's
	// fleet-wide transactions write, which this one excludes.
	tx, err := f.beginDevice(s.Device)
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	if s.Order >= maxReportedOrder {
		var made int64
		if err := tx.QueryRow(`SELECT COALESCE((SELECT id FROM update_orders WHERE device = ?), 0)`, s.Device).Scan(&made); err != nil {
			return false, err
		}
		if s.Order > made {
			return false, fmt.Errorf("update state of order %d: %w", s.Order, ErrNotOrdered)
		}
	}
	if err := f.touch(tx, s.Device, at); err != nil {
		return false, err
	}
	var raw []byte
	err = tx.QueryRow(`SELECT state FROM update_states WHERE device = ?`, s.Device).Scan(&raw)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return false, err
	}
	var old protocol.UpdateState
	if raw != nil {
		json.Unmarshal(raw, &old)
		if s.Order < old.Order {
			return false, nil
		}
		if s.Order == old.Order && s.Phase == old.Phase && s.Percent == old.Percent && s.Reason == old.Reason && s.Running == old.Running {
			return false, nil
		}
	}
	state, _ := json.Marshal(s)
	if _, err := tx.Exec(`INSERT INTO update_states (device, state, at) VALUES (?, ?, ?)
		ON CONFLICT(device) DO UPDATE SET state = excluded.state, at = excluded.at`, s.Device, state, at.UnixMilli()); err != nil {
		return false, err
	}
	if protocol.UpdateDone(s.Phase) && (s.Order != old.Order || s.Phase != old.Phase) {
		e := protocol.Event{Time: at, Type: "Normal", Reason: "Update" + s.Phase,
			Message: fmt.Sprintf("%s %s (order %d): %s", s.Kind, s.Version, s.Order, s.Phase)}
		if s.Phase != protocol.UpdateCommitted {
			e.Type, e.Message = "Warning", e.Message+": "+s.Reason
		}
		if err := f.addEvent(tx, s.Device, e, at); err != nil {
			return false, err
		}
	}
	return true, f.commit(tx, fleetwatch.Note{Device: s.Device, What: fleetwatch.Node})
}

// UpdateState is a device's newest update report, or nil.
func (f *Fleet) UpdateState(device string) (*protocol.UpdateState, error) {
	var raw []byte
	err := f.db.QueryRow(`SELECT state FROM update_states WHERE device = ?`, device).Scan(&raw)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	s := &protocol.UpdateState{}
	return s, json.Unmarshal(raw, s)
}

// UpdateTarget is what an update's controller reads of one device.
type UpdateTarget struct {
	ID       string
	Online   bool
	LastSeen time.Time
	Arch     string // the heartbeat's node architecture (GOARCH)
	Version  string // the heartbeat's, the agent's running version
	// Order is the device's newest order and the update that made it.
	Order       int64
	OrderUpdate string
	State       *protocol.UpdateState
}

// UpdateTargets reads the devices of an update in one query (the node
// status is not decoded: only its architecture is extracted).
func (f *Fleet) UpdateTargets(ids []string) (map[string]UpdateTarget, error) {
	want := make(map[string]bool, len(ids))
	for _, id := range ids {
		want[id] = true
	}
	rows, err := f.db.Query(`SELECT d.id, d.online, d.last_seen, COALESCE(` +
		f.dialect.Pick(`json_extract(d.node, '$.nodeInfo.architecture')`, `json_of(d.node)->'nodeInfo'->>'architecture'`) + `, ''), d.version,
		COALESCE(o.id, 0), COALESCE(o.update_name, ''), s.state
		FROM devices d LEFT JOIN update_orders o ON o.device = d.id LEFT JOIN update_states s ON s.device = d.id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[string]UpdateTarget, len(ids))
	for rows.Next() {
		var t UpdateTarget
		var lastSeen int64
		var state []byte
		if err := rows.Scan(&t.ID, &t.Online, &lastSeen, &t.Arch, &t.Version, &t.Order, &t.OrderUpdate, &state); err != nil {
			return nil, err
		}
		if !want[t.ID] {
			continue
		}
		if lastSeen > 0 {
			t.LastSeen = time.UnixMilli(lastSeen)
		}
		if state != nil {
			t.State = &protocol.UpdateState{}
			json.Unmarshal(state, t.State)
		}
		out[t.ID] = t
	}
	return out, rows.Err()
}
